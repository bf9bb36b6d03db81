"""What tools running beside a gateway (migrate, parity, users) need to know of it.

The gateway's `/health` answer names its data directory; the gateway writes its Pulsar
service URL, metadata namespace, how short Kafka topic names map to Pulsar and where the
users store's signing key is into `gateway-link.json` there (gateway/link_file.py),
readable by the gateway's account only: the embedded broker checks no credentials, so
its address is not given to whoever asks. A tool run by another account is told so, and
may be given `--pulsar-url` instead. An older gateway's `/health` that still names the
service URL is taken at its word.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.link_file import LINK_FILE, read_link
from pulsar_gateway.gateway.topic_names import pulsar_topic


class GatewayUnreachable(Exception):
    pass


@dataclass(frozen=True)
class GatewayLink:
    service_url: str
    metadata_namespace: str = DEFAULT_METADATA_NAMESPACE
    kafka_tenant: str = "public"
    kafka_namespace: str = "default"
    users_key_file: str = ""  # the users store's signing key, "" when it is not signed
    data_dir: str = ""  # where tools leave reports for the console; "" when not known

    def pulsar_name(self, kafka_topic: str) -> str:
        return pulsar_topic(kafka_topic, self.kafka_tenant, self.kafka_namespace)


def discover(health_url: str, timeout: float = 5.0) -> GatewayLink:
    """Ask a running gateway (its metrics port, e.g. http://127.0.0.1:9404) where Pulsar is."""
    url = health_url.rstrip("/")
    if not url.endswith("/health"):
        url += "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            state = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503 still carries the JSON
        state = json.loads(exc.read() or b"{}")
    except (OSError, ValueError) as exc:
        raise GatewayUnreachable(f"no gateway answers at {url}: {exc}") from exc
    pulsar = state.get("pulsar") or {}
    if pulsar.get("service_url"):  # a gateway from before the link file
        return GatewayLink(
            pulsar["service_url"],
            pulsar.get("metadata_namespace", DEFAULT_METADATA_NAMESPACE),
            pulsar.get("kafka_tenant", "public"),
            pulsar.get("kafka_namespace", "default"),
        )
    data_dir = state.get("data_dir")
    if not isinstance(data_dir, str) or not data_dir:
        raise GatewayUnreachable(f"{url} does not name the gateway's data directory")
    try:
        record = read_link(Path(data_dir))
    except PermissionError:
        raise GatewayUnreachable(
            f"the gateway at {url} keeps its Pulsar address in {data_dir}/{LINK_FILE}, "
            "readable by the gateway's account only: run this as that account, or give "
            "--pulsar-url"
        ) from None
    except (OSError, ValueError) as exc:
        raise GatewayUnreachable(f"no gateway link in {data_dir}: {exc}") from None
    return GatewayLink(
        record.service_url,
        record.metadata_namespace,
        record.kafka_tenant,
        record.kafka_namespace,
        record.users_key_file,
        data_dir,
    )
