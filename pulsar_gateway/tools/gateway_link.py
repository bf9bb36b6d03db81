"""What tools running beside a gateway (migrate, parity) need to know of it.

The gateway's `/health` answer names its Pulsar service URL, its metadata namespace
and how short Kafka topic names map to Pulsar; with the embedded broker on a random
port, asking the gateway is the only way to find it.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.topic_names import pulsar_topic


class GatewayUnreachable(Exception):
    pass


@dataclass(frozen=True)
class GatewayLink:
    service_url: str
    metadata_namespace: str = DEFAULT_METADATA_NAMESPACE
    kafka_tenant: str = "public"
    kafka_namespace: str = "default"

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
    if not pulsar.get("service_url"):
        raise GatewayUnreachable(f"{url} does not name the gateway's Pulsar service URL")
    return GatewayLink(
        pulsar["service_url"],
        pulsar.get("metadata_namespace", DEFAULT_METADATA_NAMESPACE),
        pulsar.get("kafka_tenant", "public"),
        pulsar.get("kafka_namespace", "default"),
    )
