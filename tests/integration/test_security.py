"""Kafka SASL_SSL and AMQP over TLS against one gateway, with users from `pulsar-gateway
users` (docs/security.md): real clients, a throwaway CA made with the openssl CLI."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from harness.certificates import make_certificates
from harness.gateway_process import REPO, GatewayProcess, free_port, set_flags
from harness.raw_kafka_socket import recv_frame, seconds_until_closed
from harness.waiting import wait_until
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_gateway(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[GatewayProcess]:
    amqps_port = free_port()
    settings = {
        "kafka.sasl_mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "kafka.tls_cert_file": certs["cert"],
        "kafka.tls_key_file": certs["key"],
        "amqp.tls_cert_file": certs["cert"],
        "amqp.tls_key_file": certs["key"],
        "amqp.tls_port": amqps_port,
        # about authentication: its users may do everything (test_authorization.py: rights)
        "authorization.superusers": "alice,bob",
    }
    extra = set_flags(settings)
    process = GatewayProcess(tmp_path_factory.mktemp("secure-gateway"), extra=extra)
    process.amqps_port = amqps_port  # type: ignore[attr-defined]
    process.start()
    for name in ("alice", "bob"):
        assert users(process, "add", name, password=PASSWORD).returncode == 0
    yield process
    code = process.stop()
    assert code == 0, f"gateway exited {code}:\n{process.log_tail()}"


def users(
    gateway: GatewayProcess, *args: str, password: str = ""
) -> subprocess.CompletedProcess[str]:
    """`pulsar-gateway users ...` against the running gateway, the password on stdin."""
    command = [sys.executable, "-m", "pulsar_gateway.cli", "users", *args]
    command += ["--gateway-health", f"http://127.0.0.1:{gateway.metrics_port}"]
    done = subprocess.run(
        command, input=password + "\n", capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert password not in done.stdout + done.stderr or not password
    return done


def kafka_config(
    gateway: GatewayProcess, certs: dict[str, Path], mechanism: str, user: str, password: str
) -> dict[str, object]:
    return {
        "bootstrap.servers": gateway.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs["ca"]),
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_over_sasl_ssl(
    secure_gateway: GatewayProcess, certs: dict[str, Path], mechanism: str
) -> None:
    topic = f"sec-{uuid.uuid4().hex[:10]}"
    config = kafka_config(secure_gateway, certs, mechanism, "alice", PASSWORD)
    producer = Producer(config)
    delivered: list[object] = []
    producer.produce(topic, b"secret payload", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None]
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:

        def fetched() -> bytes | None:
            message = consumer.poll(1)
            return message.value() if message is not None and not message.error() else None

        assert wait_until(fetched, timeout=30, interval=0) == b"secret payload"
    finally:
        consumer.close()
    assert secure_gateway.metric(
        "gateway_authentications_total", protocol="kafka", mechanism=mechanism, outcome="success"
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_over_sasl_ssl(
    secure_gateway: GatewayProcess, certs: dict[str, Path], mechanism: str
) -> None:
    from kafka import KafkaProducer

    context = ssl.create_default_context(cafile=str(certs["ca"]))
    producer = KafkaProducer(
        bootstrap_servers=secure_gateway.bootstrap,
        security_protocol="SASL_SSL",
        ssl_context=context,
        sasl_mechanism=mechanism,
        sasl_plain_username="bob",
        sasl_plain_password=PASSWORD,
    )
    try:
        metadata = producer.send(f"kp-{uuid.uuid4().hex[:8]}", b"v").get(timeout=30)
        assert metadata.offset == 0
    finally:
        producer.close()


class RawTls:
    """Exact Kafka requests over TLS, for what clients would retry or hide."""

    def __init__(self, gateway: GatewayProcess, certs: dict[str, Path]) -> None:
        context = ssl.create_default_context(cafile=str(certs["ca"]))
        plain = socket.create_connection(("127.0.0.1", gateway.kafka_port), timeout=10)
        self.sock = context.wrap_socket(plain, server_hostname="localhost")
        self.correlation = 0

    def call(self, api_key: int, version: int, body: dict[str, object]) -> dict[str, object]:
        self.correlation += 1
        self.sock.sendall(protocol.encode_request(api_key, version, self.correlation, "t", body))
        return protocol.decode_response(api_key, version, recv_frame(self.sock))

    def plain(self, user: str, password: str) -> dict[str, object]:
        shake = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert shake["error_code"] == ErrorCode.NONE
        token = f"\x00{user}\x00{password}".encode()
        return self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong password"), ("mallory", PASSWORD)])
def test_wrong_password_or_unknown_user_is_refused(
    secure_gateway: GatewayProcess, certs: dict[str, Path], user: str, password: str
) -> None:
    before = secure_gateway.metric(
        "gateway_authentications_total", protocol="kafka", mechanism="PLAIN", outcome="failure"
    )
    raw = RawTls(secure_gateway, certs)
    try:
        answer = raw.plain(user, password)
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] and password not in str(answer["error_message"])
        assert seconds_until_closed(raw.sock, 10) < 10
    finally:
        raw.close()
    after = secure_gateway.metric(
        "gateway_authentications_total", protocol="kafka", mechanism="PLAIN", outcome="failure"
    )
    assert after == before + 1
    log = secure_gateway.log_path.read_text()
    assert f"user '{user}'" in log and password not in log


def test_nothing_is_served_before_authentication(
    secure_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    raw = RawTls(secure_gateway, certs)
    try:
        versions = raw.call(ApiKey.API_VERSIONS, 0, {})
        keys = {entry["api_key"] for entry in versions["api_keys"]}  # type: ignore[union-attr]
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
        raw.sock.sendall(protocol.encode_request(ApiKey.METADATA, 1, 9, "t", {"topics": None}))
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            recv_frame(raw.sock)
    finally:
        raw.close()
    # a client that skips SASL altogether gets no further
    producer = Producer(
        {
            "bootstrap.servers": secure_gateway.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs["ca"]),
            "message.timeout.ms": 3000,
        }
    )
    errors: list[object] = []
    producer.produce("never", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None


def test_users_cli_add_remove_on_a_running_gateway(
    secure_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    name = f"carol{uuid.uuid4().hex[:6]}"
    assert users(secure_gateway, "add", name, password="first pw").returncode == 0
    assert name in users(secure_gateway, "list").stdout.split()

    def answer(password: str) -> int:
        raw = RawTls(secure_gateway, certs)
        try:
            return int(raw.plain(name, password)["error_code"])  # type: ignore[call-overload]
        finally:
            raw.close()

    wait_until(lambda: answer("first pw") == ErrorCode.NONE, timeout=15, message="user added")
    assert users(secure_gateway, "passwd", name, password="second pw").returncode == 0
    wait_until(lambda: answer("first pw") != ErrorCode.NONE, timeout=15, message="old password")
    assert answer("second pw") == ErrorCode.NONE
    assert users(secure_gateway, "remove", name).returncode == 0
    wait_until(
        lambda: answer("second pw") == ErrorCode.SASL_AUTHENTICATION_FAILED,
        timeout=15,
        message="removed user refused",
    )
    assert name not in users(secure_gateway, "list").stdout.split()
    assert users(secure_gateway, "remove", name).returncode == 1
    on_disk = b"".join(p.read_bytes() for p in secure_gateway.data_dir.rglob("*") if p.is_file())
    assert b"first pw" not in on_disk and b"second pw" not in on_disk


def test_pika_over_tls_with_a_store_user(
    secure_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=secure_gateway.amqps_port,  # type: ignore[attr-defined]
        credentials=pika.PlainCredentials("alice", PASSWORD),
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
    )
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        queue = f"q-{uuid.uuid4().hex[:8]}"
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"over tls")
        body = wait_until(lambda: channel.basic_get(queue, auto_ack=True)[2], timeout=15)
        assert body == b"over tls"
    finally:
        connection.close()
    wrong = pika.ConnectionParameters(
        host="127.0.0.1",
        port=secure_gateway.amqps_port,  # type: ignore[attr-defined]
        credentials=pika.PlainCredentials("alice", "not it"),
        ssl_options=pika.SSLOptions(context, server_hostname="localhost"),
    )
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(wrong)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_over_sasl_ssl(
    secure_gateway: GatewayProcess, certs: dict[str, Path], mechanism: str
) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def produce() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure_gateway.bootstrap,
            security_protocol="SASL_SSL",
            ssl_context=ssl.create_default_context(cafile=str(certs["ca"])),
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORD,
        )
        await producer.start()
        try:
            sent = await producer.send_and_wait(f"aio-{uuid.uuid4().hex[:8]}", b"v")
            return sent.offset
        finally:
            await producer.stop()

    assert asyncio.run(produce()) == 0


def test_kcat_with_sasl_scram(
    secure_gateway: GatewayProcess, certs: dict[str, Path], tmp_path: Path
) -> None:
    from harness.kcat import new_librdkafka_dir, run_kcat

    config = tmp_path / "kcat.conf"  # the password in a file, not on the command line
    config.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.ca.location={certs['ca']}\n"
        "sasl.mechanisms=SCRAM-SHA-512\n"
        f"sasl.username=bob\nsasl.password={PASSWORD}\n"
    )
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    lib_dir = new_librdkafka_dir(tmp_path)
    common = ["-F", str(config), "-b", secure_gateway.bootstrap, "-t", topic]
    produced = run_kcat([*common, "-P"], lib_dir, b"hello\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = run_kcat([*common, "-C", "-o", "beginning", "-c", "1", "-e"], lib_dir)
    assert consumed.stdout == b"hello\n", consumed.stderr.decode()


def test_aio_pika_over_tls_with_a_store_user(
    secure_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    import asyncio

    import aio_pika

    port = secure_gateway.amqps_port  # type: ignore[attr-defined]
    context = ssl.create_default_context(cafile=str(certs["ca"]))

    async def round_trip() -> bytes:
        connection = await aio_pika.connect_robust(
            f"amqps://bob:{PASSWORD.replace(' ', '%20')}@localhost:{port}/",
            ssl_context=context,
        )
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(f"aq-{uuid.uuid4().hex[:8]}")
            await channel.default_exchange.publish(aio_pika.Message(b"aio tls"), queue.name)
            message = await queue.get(timeout=15, fail=True)
            assert message is not None
            await message.ack()
            return message.body

    assert asyncio.run(round_trip()) == b"aio tls"
    assert secure_gateway.metric(
        "gateway_authentications_total", protocol="amqp", mechanism="PLAIN", outcome="success"
    )


def test_scram_credentials_managed_through_the_kafka_admin_api(
    secure_gateway: GatewayProcess, certs: dict[str, Path]
) -> None:
    """AdminClient's user SCRAM calls write the same users store the listeners check: a user
    added over Kafka logs in at once with that password, and is refused once deleted."""
    admin = AdminClient(kafka_config(secure_gateway, certs, "SCRAM-SHA-256", "alice", PASSWORD))
    name, password = f"carol-{uuid.uuid4().hex[:6]}", "carol's secret"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    added = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(name, info, password.encode(), os.urandom(16))]
    )
    added[name].result(30)
    described = admin.describe_user_scram_credentials([name])[name].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]

    def logs_in() -> bool:
        client = AdminClient(kafka_config(secure_gateway, certs, "SCRAM-SHA-512", name, password))
        try:
            client.list_topics(timeout=10)
        except KafkaException:
            return False
        return True

    assert logs_in()
    gone = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512)]
    )
    gone[name].result(30)
    assert not logs_in()
