"""SCRAM credentials, PLAIN checks against them, and the Kafka SASL state machine, without
a socket: the clients' side is scramp's client, as a Kafka client would run it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
import scramp

from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    ScramExchange,
    make_record,
    parse_plain,
    password_matches,
    salted_password,
)
from pulsar_gateway.storage.users import check_name


class Directory:
    def __init__(self, **passwords: str) -> None:
        self.records = {name: make_record(pw, iterations=4096) for name, pw in passwords.items()}

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self.records.get(name)


USERS = Directory(alice="s3cret-pw", bob="other")


def test_a_record_holds_no_password_and_differs_per_call() -> None:
    record = make_record("s3cret-pw")
    text = json.dumps(record)
    assert "s3cret-pw" not in text
    assert set(record) == set(SCRAM_MECHANISMS)
    assert make_record("s3cret-pw") != record  # fresh salts


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_hashlib_derivation_agrees_with_scramp(mechanism: str) -> None:
    salt = b"0123456789abcdef"
    expected = scramp.ScramMechanism(mechanism).make_auth_info("pässwörd", 4096, salt)
    salted = salted_password(mechanism, "pässwörd", salt, 4096)
    assert salted is not None
    keys = scramp.ScramMechanism(mechanism).make_stored_server_keys(salted)
    assert keys == (expected[1], expected[2])


def test_plain_is_checked_against_the_scram_keys() -> None:
    record = USERS.lookup("alice")
    assert password_matches(record, "s3cret-pw")
    assert not password_matches(record, "s3cret-pW")
    assert not password_matches(record, "")
    assert not password_matches(None, "s3cret-pw")


def _scram(mechanism: str, user: str, password: str) -> tuple[scramp.ScramClient, ScramExchange]:
    return scramp.ScramClient([mechanism], user, password), ScramExchange(mechanism, USERS)


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_scram_exchange_proves_both_sides(mechanism: str) -> None:
    client, server = _scram(mechanism, "alice", "s3cret-pw")
    first, done = server.step(client.get_client_first().encode())
    assert not done
    client.set_server_first(first.decode())
    final, done = server.step(client.get_client_final().encode())
    assert done
    client.set_server_final(final.decode())  # raises unless the server's proof is right
    assert server.user == "alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("nobody", "s3cret-pw")])
def test_scram_refuses_a_wrong_password_or_unknown_user(user: str, password: str) -> None:
    client, server = _scram("SCRAM-SHA-512", user, password)
    with pytest.raises(AuthenticationFailed) as refused:
        first, _ = server.step(client.get_client_first().encode())
        client.set_server_first(first.decode())
        server.step(client.get_client_final().encode())
    assert password not in str(refused.value)


def test_parse_plain() -> None:
    assert parse_plain(b"\x00alice\x00pw") == ("alice", "pw")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "pw")
    for bad in (b"alice\x00pw", b"eve\x00alice\x00pw"):
        with pytest.raises(ValueError) as refused:
            parse_plain(bad)
        assert "pw" not in str(refused.value)


def test_user_names_that_sasl_cannot_carry_are_refused() -> None:
    check_name("alice.smith@example")
    for bad in ("", " alice", "a,b", "a=b", "a\x00b"):
        with pytest.raises(ValueError):
            check_name(bad)


def _kafka_plain(user: str, password: str) -> tuple[SaslSession, dict[str, Any]]:
    session = SaslSession(["PLAIN", "SCRAM-SHA-256"], USERS, ("127.0.0.1", 1))
    assert session.handshake({"mechanism": "PLAIN"})["error_code"] == ErrorCode.NONE
    token = f"\x00{user}\x00{password}".encode()
    return session, session.authenticate({"auth_bytes": token})


def test_kafka_plain_success_and_failure() -> None:
    session, answer = _kafka_plain("alice", "s3cret-pw")
    assert answer["error_code"] == ErrorCode.NONE and session.authenticated == "alice"
    session, answer = _kafka_plain("alice", "nope")
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer["error_message"] and "nope" not in answer["error_message"]
    assert session.failed and not session.authenticated


def test_kafka_sasl_states() -> None:
    session = SaslSession(["SCRAM-SHA-256"], USERS, None)
    answer = session.authenticate({"auth_bytes": b"x"})
    assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and session.failed
    session = SaslSession(["SCRAM-SHA-256"], USERS, None)
    answer = session.handshake({"mechanism": "PLAIN"})
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer["mechanisms"] == ["SCRAM-SHA-256"]


def test_amqp_users_store_wins_over_the_config_table() -> None:
    authenticator = Authenticator({"guest": "guest", "alice": "from-config"}, directory=USERS)
    assert authenticator.authenticate("PLAIN", b"\x00alice\x00s3cret-pw", "10.0.0.1") == "alice"
    with pytest.raises(AmqpError) as refused:
        authenticator.authenticate("PLAIN", b"\x00alice\x00from-config", "10.0.0.1")
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert authenticator.authenticate("PLAIN", b"\x00guest\x00guest", "127.0.0.1") == "guest"
    with pytest.raises(AmqpError):
        authenticator.authenticate("PLAIN", b"\x00guest\x00guest", "10.0.0.1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _plain_round(session: SaslSession, user: str, password: str) -> dict[str, Any]:
    assert session.handshake({"mechanism": "PLAIN"})["error_code"] == ErrorCode.NONE
    return session.authenticate({"auth_bytes": f"\x00{user}\x00{password}".encode()})


def test_kip_368_session_lifetime_and_reauthentication() -> None:
    clock = Clock()
    session = SaslSession(["PLAIN"], USERS, None, lifetime_ms=3000, clock=clock)
    answer = _plain_round(session, "alice", "s3cret-pw")
    assert answer["session_lifetime_ms"] == 3000 and not session.expired
    clock.now += 2.5
    assert _plain_round(session, "alice", "s3cret-pw")["error_code"] == ErrorCode.NONE
    clock.now += 2.5
    assert not session.expired  # extended by the re-authentication
    clock.now += 1
    assert session.expired


def test_reauthentication_may_not_change_user_or_mechanism() -> None:
    session = SaslSession(["PLAIN", "SCRAM-SHA-256"], USERS, None, lifetime_ms=1000)
    _plain_round(session, "alice", "s3cret-pw")
    answer = _plain_round(session, "bob", "other")
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED and session.failed
    session = SaslSession(["PLAIN", "SCRAM-SHA-256"], USERS, None, lifetime_ms=1000)
    _plain_round(session, "alice", "s3cret-pw")
    answer = session.handshake({"mechanism": "SCRAM-SHA-256"})
    assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and session.failed


def test_client_supplied_names_are_logged_escaped_and_cut() -> None:
    from pulsar_gateway.security.credentials import shown

    assert shown("alice") == "alice"
    assert "\n" not in shown("eve\nINFO forged line")
    assert shown("x" * 1000) == "x" * 64 + "..."
    session, answer = _kafka_plain("eve\nINFO gateway: admin logged in", "pw")
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_a_session_from_the_store_ends_when_its_user_changes() -> None:
    users = Directory(alice="s3cret-pw", bob="other")
    session = SaslSession(["PLAIN"], users, None)
    _plain_round(session, "alice", "s3cret-pw")
    assert session.current and not session.credentials_changed
    users.records["alice"] = dict(users.records["alice"])  # the same record re-read
    assert session.current
    users.records["alice"] = make_record("new-pw")  # passwd
    assert session.credentials_changed and not session.current
    session = SaslSession(["PLAIN"], users, None)
    _plain_round(session, "bob", "other")
    del users.records["bob"]  # remove
    assert not session.current


def test_amqp_credentials_of_follow_the_store_then_the_table() -> None:
    users = Directory(alice="s3cret-pw")
    authenticator = Authenticator({"guest": "guest", "carol": "pw"}, directory=users)
    at_login = authenticator.credentials_of("alice")
    assert at_login is users.records["alice"]
    assert authenticator.credentials_of("carol") == ("amqp.users", "pw")
    assert authenticator.credentials_of("nobody") is None
    users.records["alice"] = make_record("new-pw")
    assert authenticator.credentials_of("alice") != at_login
