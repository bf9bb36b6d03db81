"""The embedded broker's address is nobody's business, and the users store takes only
signed writes (issue 33). Before, `/health` named the unauthenticated embedded broker, and
anyone on the host could append a user and make it superuser through it. Now `/health`
names only the 0700 data directory; a record written straight to the broker without the
users key, with another key, or an old signed one replayed, changes nothing; records from
before signing are adopted once; `pulsar-gateway users` (run by the gateway's account)
still works on a running gateway."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.gateway_process import REPO, GatewayProcess, set_flags
from harness.raw_kafka_socket import recv_frame
from harness.waiting import wait_until
from pulsar_gateway.gateway.backend.embedded import EmbeddedBroker
from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
from pulsar_gateway.gateway.backend.reader_stream import EARLIEST
from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE
from pulsar_gateway.gateway.messages import OutMessage
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import make_record
from pulsar_gateway.storage.users import UsersStore, users_topic

PASSWORD = "signed store pw"
TOPIC = users_topic(DEFAULT_METADATA_NAMESPACE)
FOREIGN = "public/elsewhere"  # a namespace nobody was granted


def _write_before_signing(data_dir: Path) -> None:
    """A store as a gateway from before signing left it: `olduser`, unsigned."""

    async def write() -> None:
        broker = EmbeddedBroker(data_dir / "pulsar")
        await broker.start()
        backend = PulsarBackend(broker.service_url)
        await backend.start()
        store = UsersStore(backend, DEFAULT_METADATA_NAMESPACE)
        try:
            await store.load(follow=False)
            await store.set_password("olduser", PASSWORD)
        finally:
            await store.close()
            await backend.close()
            await broker.stop()

    asyncio.run(write())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    data_dir = tmp_path_factory.mktemp("signed")
    _write_before_signing(data_dir)
    settings = {"kafka.sasl_mechanisms": "PLAIN", "gateway.log_level": "info"}
    process = GatewayProcess(data_dir, extra=set_flags(settings))
    process.start()
    yield process
    assert process.stop() == 0, process.log_tail()


def users(gateway: GatewayProcess, *args: str, password: str = "") -> str:
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", *args]
    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    done = subprocess.run(
        command, input=password + "\n", capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def kafka_as(gateway: GatewayProcess, user: str, password: str = PASSWORD) -> int:
    """Log in with PLAIN; then Metadata for a topic in a namespace nobody was granted,
    without auto-creation: UNKNOWN_TOPIC_OR_PARTITION for a superuser,
    TOPIC_AUTHORIZATION_FAILED for anyone else. The login's own error when it fails."""
    with socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10) as sock:
        for key, version, body in (
            (ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
            (ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": f"\x00{user}\x00{password}".encode()}),
        ):
            sock.sendall(protocol.encode_request(key, version, 1, "t", body))
            answer = protocol.decode_response(key, version, recv_frame(sock))
            if answer["error_code"]:
                return int(answer["error_code"])
        body = {
            "topics": [{"name": f"{FOREIGN}/t", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        sock.sendall(protocol.encode_request(ApiKey.METADATA, 12, 2, "t", body))
        answer = protocol.decode_response(ApiKey.METADATA, 12, recv_frame(sock))
        return int(answer["topics"][0]["error_code"])


SUPERUSER = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
BOUND = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def broker_messages(gateway: GatewayProcess, key: str) -> list[Any]:
    """The users topic's messages under `key`, read straight from the broker."""

    async def read() -> list[Any]:
        backend = PulsarBackend(f"pulsar://127.0.0.1:{gateway.broker_port}")
        await backend.start()
        stream = await backend.open_reader(TOPIC, EARLIEST)
        found: list[Any] = []
        try:
            while batch := await stream.read_batch(1000, timeout=1):
                found.extend(m for m in batch if m.key == key)
        finally:
            await stream.close()
            await backend.close()
        return found

    return asyncio.run(read())


def write_to_broker(gateway: GatewayProcess, *messages: OutMessage) -> None:
    """What any local account can do to the embedded broker: append to the users topic."""

    async def write() -> None:
        backend = PulsarBackend(f"pulsar://127.0.0.1:{gateway.broker_port}")
        await backend.start()
        try:
            await backend.send(TOPIC, list(messages), batching=False)
        finally:
            await backend.close()

    asyncio.run(write())


def refused(gateway: GatewayProcess, reason: str) -> float:
    return gateway.metric("gateway_users_store_refused_total", reason=reason)


def test_health_names_no_broker_address(gateway: GatewayProcess) -> None:
    health = gateway.health()
    assert health is not None and health["ok"]
    text = json.dumps(health)
    assert "pulsar://" not in text and str(gateway.broker_port) not in text
    assert health["data_dir"] == str(gateway.data_dir.absolute())
    link = json.loads((gateway.data_dir / "gateway-link.json").read_text())
    assert link["service_url"] == f"pulsar://127.0.0.1:{gateway.broker_port}"
    assert (gateway.data_dir / "gateway-link.json").stat().st_mode & 0o077 == 0
    assert (gateway.data_dir / "pulsar" / "users.key").stat().st_mode & 0o077 == 0


def test_records_from_before_signing_are_adopted(gateway: GatewayProcess) -> None:
    assert kafka_as(gateway, "olduser") == BOUND  # logs in: adopted, and bound by rights
    (unsigned, *signed) = broker_messages(gateway, "user/olduser")
    assert "__gw.signature" not in unsigned.properties
    assert [m.properties["__gw.version"] for m in signed] == ["1"]


def test_unsigned_or_foreign_writes_to_the_broker_change_nothing(gateway: GatewayProcess) -> None:
    before = refused(gateway, "unsigned"), refused(gateway, "bad_signature")
    record = json.dumps(make_record(PASSWORD)).encode()
    superuser = json.dumps({"superuser": True, "grants": []}).encode()
    write_to_broker(
        gateway,
        OutMessage(record, key="user/mallory"),
        OutMessage(superuser, key="rights/mallory"),
        OutMessage(
            record,
            key="user/trudy",
            properties={"__gw.version": "7", "__gw.signature": "00" * 32},
        ),
    )
    wait_until(
        lambda: (
            (refused(gateway, "unsigned"), refused(gateway, "bad_signature"))
            == (before[0] + 2, before[1] + 1)
        ),
        10,
        message="the forged records refused",
    )
    assert kafka_as(gateway, "mallory") == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert kafka_as(gateway, "trudy") == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "mallory" not in users(gateway, "list")


def test_a_replayed_grant_does_not_come_back(gateway: GatewayProcess) -> None:
    users(gateway, "add", "alice", password=PASSWORD)  # through the gateway's link: signed
    users(gateway, "grant", "alice", "--superuser")
    wait_until(lambda: kafka_as(gateway, "alice") == SUPERUSER, 10, message="alice superuser")
    users(gateway, "revoke", "alice", "--superuser")
    wait_until(lambda: kafka_as(gateway, "alice") == BOUND, 10, message="alice bound again")
    grant = next(
        m for m in broker_messages(gateway, "rights/alice") if b'"superuser":true' in m.payload
    )
    before = refused(gateway, "not_newer")
    write_to_broker(gateway, OutMessage(grant.payload, key=grant.key, properties=grant.properties))
    wait_until(
        lambda: refused(gateway, "not_newer") == before + 1, 10, message="the replay refused"
    )
    assert kafka_as(gateway, "alice") == BOUND
