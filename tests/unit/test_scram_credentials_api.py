"""DescribeUserScramCredentials and AlterUserScramCredentials on the in-memory users port:
Kafka's rules and errors, and keys a SCRAM login accepts (the client's SaltedPassword in,
only StoredKey and ServerKey kept)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

import scramp

from harness.kafka_memory_store import MemoryCredentials
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import auth_info
from tests.unit.test_kafka_apis import Broker, run

SHA256, SHA512 = 1, 2


def with_users() -> tuple[Broker, MemoryCredentials]:
    broker = Broker()
    users = MemoryCredentials()
    broker.storage = broker.context.storage = dataclasses.replace(broker.storage, credentials=users)
    return broker, users


def upsert(name: str, password: str, mechanism: int = SHA256, iterations: int = 4096) -> Any:
    salt = os.urandom(16)
    digest = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted,
    }


async def alter(broker: Broker, deletions: list[Any], upsertions: list[Any]) -> list[Any]:
    body = {"deletions": deletions, "upsertions": upsertions}
    response = await broker.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, body)
    return [(r["user"], r["error_code"]) for r in response["results"]]


async def describe(broker: Broker, names: list[str] | None) -> dict[str, Any]:
    body = {"users": None if names is None else [{"name": n} for n in names]}
    return await broker.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, body)


def test_upserted_keys_let_the_password_log_in_with_scram() -> None:
    async def scenario() -> None:
        broker, users = with_users()
        assert await alter(broker, [], [upsert("alice", "pw-1")]) == [("alice", ErrorCode.NONE)]
        record = users.lookup("alice")
        assert record is not None and set(record) == {"SCRAM-SHA-256"}
        assert "pw-1" not in repr(record) and "salted_password" not in repr(record)
        # a real SCRAM exchange against the stored keys (scramp's client and server)
        mechanism = scramp.ScramMechanism("SCRAM-SHA-256")
        server = mechanism.make_server(lambda _user: auth_info(record, "SCRAM-SHA-256"))
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "pw-1")
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())  # raises if the proof is wrong

    run(scenario)


def test_describe_lists_mechanisms_and_iterations_and_refuses_unknown_users() -> None:
    async def scenario() -> None:
        broker, _users = with_users()
        await alter(broker, [], [upsert("bob", "x", SHA512, 8192), upsert("bob", "x")])
        everyone = await describe(broker, None)
        [bob] = everyone["results"]
        assert bob["user"] == "bob"
        assert sorted((i["mechanism"], i["iterations"]) for i in bob["credential_infos"]) == [
            (SHA256, 4096),
            (SHA512, 8192),
        ]
        some = await describe(broker, ["nobody", "bob", "bob"])
        codes = [(r["user"], r["error_code"]) for r in some["results"]]
        assert codes == [
            ("nobody", ErrorCode.RESOURCE_NOT_FOUND),
            ("bob", ErrorCode.DUPLICATE_RESOURCE),
            ("bob", ErrorCode.DUPLICATE_RESOURCE),
        ]

    run(scenario)


def test_kafka_rules_for_alterations() -> None:
    async def scenario() -> None:
        broker, users = with_users()
        results = await alter(
            broker,
            [{"name": "ghost", "mechanism": SHA256}],
            [
                upsert("few", "x", iterations=1000),
                upsert("many", "x", iterations=20000),
                {**upsert("odd", "x"), "mechanism": 0},
                upsert("twice", "x"),
                upsert("twice", "y"),
            ],
        )
        assert results == [
            ("ghost", ErrorCode.RESOURCE_NOT_FOUND),
            ("few", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ("many", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ("odd", ErrorCode.UNSUPPORTED_SASL_MECHANISM),
            ("twice", ErrorCode.DUPLICATE_RESOURCE),
        ]
        assert users.names() == []
        await alter(broker, [], [upsert("carol", "x"), upsert("carol", "x", SHA512)])
        assert await alter(broker, [{"name": "carol", "mechanism": SHA256}], []) == [
            ("carol", ErrorCode.NONE)
        ]
        assert set(users.lookup("carol") or {}) == {"SCRAM-SHA-512"}
        await alter(broker, [{"name": "carol", "mechanism": SHA512}], [])
        assert users.lookup("carol") is None  # no mechanism left: the user is gone

    run(scenario)
