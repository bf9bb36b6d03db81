"""Unknown users are refused like a wrong password, on every login path (issue 33): same
answer, and a time that does not tell them apart. Before, AMQP refused an unknown user in
0.4 ms and a stored one with a wrong password in 2.8 ms, and SCRAM refused an unknown user
at its first message.

Each path is timed in the process (no socket, whose noise would hide the difference), in
the thread's CPU time (other processes on a loaded machine stretch wall-clock time at random,
which made the medians differ by three either way): attempts alternate between the two
cases and the medians must be within a factor of two of each other; the difference they
catch was a factor of seven and more."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import scramp

from pulsar_gateway.handlers.amqp.authentication import Authenticator
from pulsar_gateway.handlers.amqp.errors import AmqpError
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import make_record

ROUNDS = 15


class Directory:
    def __init__(self, **passwords: str) -> None:
        self.records = {name: make_record(pw) for name, pw in passwords.items()}

    def lookup(self, name: str) -> Mapping[str, Any] | None:
        return self.records.get(name)


USERS = Directory(alice="alice's password")


def assert_alike(known: Callable[[], object], unknown: Callable[[], object]) -> None:
    """The medians of the two attempts, interleaved, within a factor of two."""
    times: dict[str, list[float]] = {"known": [], "unknown": []}
    for _ in range(ROUNDS):
        for name, attempt in (("known", known), ("unknown", unknown)):
            start = time.thread_time()
            attempt()
            times[name].append(time.thread_time() - start)
    known_median = statistics.median(times["known"])
    unknown_median = statistics.median(times["unknown"])
    ratio = unknown_median / known_median
    assert 0.5 < ratio < 2.0, (
        f"unknown user {unknown_median * 1e3:.3f} ms, wrong password {known_median * 1e3:.3f} ms"
    )


def _amqp_refusal(authenticator: Authenticator, mechanism: str, user: str) -> str:
    if mechanism == "PLAIN":
        response = f"\x00{user}\x00wrong".encode()
    else:  # AMQPLAIN: a field table without its length
        from pamqp import encode

        response = encode.field_table({"LOGIN": user, "PASSWORD": "wrong"})[4:]
    with pytest.raises(AmqpError) as refused:
        authenticator.authenticate(mechanism, response, "127.0.0.1")
    return str(refused.value).replace(user, "<user>")


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
@pytest.mark.parametrize("known_user", ["alice", "guest"])  # the store's, the table's
def test_amqp_unknown_user_costs_a_wrong_password(mechanism: str, known_user: str) -> None:
    authenticator = Authenticator({"guest": "guest"}, directory=USERS)
    known = _amqp_refusal(authenticator, mechanism, known_user)
    assert _amqp_refusal(authenticator, mechanism, "nobody") == known
    assert_alike(
        lambda: _amqp_refusal(authenticator, mechanism, known_user),
        lambda: _amqp_refusal(authenticator, mechanism, "nobody"),
    )


def _kafka_plain(user: str) -> dict[str, Any]:
    session = SaslSession(["PLAIN"], USERS, ("127.0.0.1", 1))
    session.handshake({"mechanism": "PLAIN"})
    return session.authenticate({"auth_bytes": f"\x00{user}\x00wrong".encode()})


def test_kafka_plain_unknown_user_costs_a_wrong_password() -> None:
    assert _kafka_plain("nobody") == _kafka_plain("alice")
    assert _kafka_plain("alice")["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert_alike(lambda: _kafka_plain("alice"), lambda: _kafka_plain("nobody"))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_scram_unknown_user_gets_a_challenge_and_fails_at_the_proof(mechanism: str) -> None:
    """The unknown user's exchange runs like a wrong password's: a server-first with a salt
    (the same one each time, as a stored user's), then the same refusal at the proof."""

    def exchange(user: str) -> tuple[Callable[[], dict[str, Any]], str]:
        client = scramp.ScramClient([mechanism], user, "wrong")
        session = SaslSession([mechanism], USERS, ("127.0.0.1", 1))
        session.handshake({"mechanism": mechanism})
        first = session.authenticate({"auth_bytes": client.get_client_first().encode()})
        assert first["error_code"] == ErrorCode.NONE, first
        client.set_server_first(first["auth_bytes"].decode())
        salt = first["auth_bytes"].decode().split(",")[1]
        final = client.get_client_final().encode()  # the client's PBKDF2, not timed
        return lambda: session.authenticate({"auth_bytes": final}), salt

    known_final, known_salt = exchange("alice")
    unknown_final, unknown_salt = exchange("nobody")
    assert unknown_salt == exchange("nobody")[1] and known_salt == exchange("alice")[1]
    refused = known_final()
    assert refused["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert unknown_final() == refused

    def timed_first(user: str) -> None:
        session = SaslSession([mechanism], USERS, ("127.0.0.1", 1))
        session.handshake({"mechanism": mechanism})
        client_first = scramp.ScramClient([mechanism], user, "wrong").get_client_first()
        session.authenticate({"auth_bytes": client_first.encode()})

    assert_alike(lambda: timed_first("alice"), lambda: timed_first("nobody"))
