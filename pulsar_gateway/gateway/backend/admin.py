"""Apache Pulsar's admin REST API v2, for what the binary protocol cannot do.

Only used when the gateway fronts a real cluster (`pulsar.admin_url`); the
embedded broker has no admin API at all, which `capabilities` reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass

from pulsar_gateway.gateway.backend.connection_security import NO_SECURITY, PulsarSecurity
from pulsar_gateway.gateway.errors import StorageError

log = logging.getLogger("gateway.backend")


@dataclass(frozen=True)
class Capabilities:
    partitioned_topics: bool
    delete_storage: bool
    retention: bool


EMBEDDED_CAPABILITIES = Capabilities(
    partitioned_topics=False, delete_storage=False, retention=False
)
CLUSTER_CAPABILITIES = Capabilities(partitioned_topics=True, delete_storage=True, retention=True)


class AdminError(StorageError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"admin API {status}: {message}")
        self.status = status


def _path(topic: str) -> str:
    """persistent://t/ns/name -> persistent/t/ns/name"""
    scheme, _, rest = topic.partition("://")
    return f"{scheme}/{rest}"


class PulsarAdmin:
    """The admin calls, over https:// with `pulsar.tls_trust_certs_file` and hostname
    verification, and with the token (`Authorization: Bearer`) or client certificate the
    binary protocol uses (connection_security.py)."""

    def __init__(
        self, admin_url: str, timeout: float = 10.0, security: PulsarSecurity = NO_SECURITY
    ) -> None:
        self.base = admin_url.rstrip("/") + "/admin/v2/"
        self.timeout = timeout
        self.security = security
        self._context = security.admin_context()
        if security.method == "oauth2":
            log.warning(
                "pulsar.admin_url: admin calls carry no OAuth2 token (pulsar-client does not "
                "hand out the one it fetches); a cluster that requires one refuses them"
            )

    def _call(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        for name, value in self.security.admin_headers().items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=self.timeout, context=self._context
            ) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, exc.read().decode(errors="replace")) from exc
        except OSError as exc:
            raise AdminError(0, str(exc)) from exc
        return json.loads(text) if text else None

    async def call(self, method: str, path: str, body: object | None = None) -> object:
        return await asyncio.to_thread(self._call, method, path, body)

    async def storage_size(self, topic: str) -> int:
        """The bytes the topic keeps in storage (its stats' `storageSize`)."""
        stats = await self.call("GET", f"{_path(topic)}/stats")
        if not isinstance(stats, dict) or not isinstance(stats.get("storageSize"), int):
            raise ValueError(f"no storageSize in the stats of {topic}")
        return int(stats["storageSize"])

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        await self.call("PUT", f"{_path(topic)}/partitions", partitions)

    async def update_partitions(self, topic: str, partitions: int) -> None:
        await self.call("POST", f"{_path(topic)}/partitions", partitions)

    async def delete_partitioned_topic(self, topic: str) -> None:
        await self.call("DELETE", f"{_path(topic)}/partitions?force=true")
