"""A plain Kafka connection for the migration's data path, on the project's own codec.

The copy moves record batches as they are (docs/tools.md, "Migrate"): a client library
would turn every record into an object and build new batches from them, which cost the
copy most of its time. So the data path fetches and produces raw batches over this
connection, while admin work (topics, groups, offsets) stays with aiokafka. One request
is in flight at a time on a connection; answers are matched by correlation id.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.tools.migration.errors import MigrationError

API_VERSIONS = 18
METADATA = 3
CLIENT_ID = "pulsar-gateway-migrate"
# A response bigger than this is refused: a Fetch asks for at most MAX_FETCH_BYTES.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


class KafkaWire:
    """One connection to one broker: `call` sends a request and returns its decoded answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._correlation = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] | None = None

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 30) -> KafkaWire:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=1 << 20), timeout
            )
        except (OSError, TimeoutError) as exc:
            raise MigrationError(f"cannot connect to Kafka at {host}:{port}: {exc}") from exc
        return cls(reader, writer)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass

    async def call(
        self, api_key: int, version: int, body: dict[str, Any], timeout: float = 60
    ) -> dict[str, Any]:
        correlation = next(self._correlation)
        frame = protocol.encode_request(api_key, version, correlation, CLIENT_ID, body)
        async with self._lock:
            try:
                self._writer.write(frame)
                answer = await asyncio.wait_for(self._answer(), timeout)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                raise MigrationError(f"Kafka request {api_key} v{version} failed: {exc}") from exc
        (got,) = _CORRELATION.unpack_from(answer)
        if got != correlation:
            raise MigrationError(f"answer {got} to request {correlation}: the stream is broken")
        return protocol.decode_response(api_key, version, memoryview(answer))

    async def _answer(self) -> bytes:
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise MigrationError(f"a Kafka answer of {size} bytes is out of bounds")
        return await self._reader.readexactly(size)

    async def version(self, api_key: int, lowest: int, highest: int) -> int:
        """The newest version of `api_key` both sides speak, within [lowest, highest]."""
        if self._versions is None:
            answer = await self.call(API_VERSIONS, 0, {})
            self._versions = {
                item["api_key"]: (item["min_version"], item["max_version"])
                for item in answer["api_keys"]
            }
        low, high = self._versions.get(api_key, (0, -1))
        chosen = min(high, highest)
        if chosen < max(low, lowest):
            raise MigrationError(
                f"the broker serves API {api_key} at versions {low}-{high}; the migration "
                f"needs one in {lowest}-{highest}"
            )
        return chosen


async def partition_leaders(
    wire: KafkaWire, topics: list[str]
) -> dict[tuple[str, int], tuple[str, int]]:
    """(topic, partition) -> (host, port) of its leader, from one Metadata request."""
    version = await wire.version(METADATA, 1, 9)
    answer = await wire.call(
        METADATA,
        version,
        {
            "topics": [{"name": name} for name in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
    leaders: dict[tuple[str, int], tuple[str, int]] = {}
    for topic in answer["topics"]:
        if topic["error_code"]:
            raise MigrationError(f"metadata of {topic['name']}: error {topic['error_code']}")
        for partition in topic["partitions"]:
            leader = brokers.get(partition["leader_id"])
            if leader is None:
                raise MigrationError(
                    f"{topic['name']}-{partition['partition_index']} has no leader now"
                )
            leaders[(topic["name"], partition["partition_index"])] = leader
    return leaders
