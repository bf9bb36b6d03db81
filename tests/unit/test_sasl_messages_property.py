"""Hostile SASL messages (property tests): whatever bytes a client sends as a SCRAM
client-first or client-final message, or as a PLAIN response, the Kafka SASL session answers
with SASL_AUTHENTICATION_FAILED (or goes on with the exchange), never an exception that would
drop the connection without the protocol's answer, and never authenticates without the
password. The bytes are random, a real exchange's messages with a piece cut and others put
in, or the pieces SCRAM's grammar is made of (RFC 5802 section 7)."""

from __future__ import annotations

from typing import Any

import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.hypothesis_budget import examples
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import make_record

MECHANISM = "SCRAM-SHA-256"
ALICE = make_record("s3cret-pw", iterations=4096)


class Users:
    def lookup(self, name: str) -> dict[str, Any] | None:
        return ALICE if name == "alice" else None


PIECES = ["n,,", "y,,", "p=x,,", "a=", "n=", "r=", "c=", "s=", "i=", "p=", "e=", "m=", "v="]
PIECES += [",", "=", "=2C", "=3D", "==", "biws", "alice", "AAAA", "\x00", "é", "-1", "0", "+/"]


def _client_messages() -> tuple[str, str]:
    """A real exchange's client-first and client-final, for alice with her password."""
    client = scramp.ScramClient([MECHANISM], "alice", "s3cret-pw")
    session = _session()
    session.handshake({"mechanism": MECHANISM})
    first = client.get_client_first()
    answer = session.authenticate({"auth_bytes": first.encode()})
    client.set_server_first(answer["auth_bytes"].decode())
    return first, client.get_client_final()


def _session() -> SaslSession:
    return SaslSession([MECHANISM, "PLAIN"], Users(), ("127.0.0.1", 1))


def _edited(real: str) -> st.SearchStrategy[bytes]:
    cut = st.tuples(
        st.integers(0, len(real)),
        st.integers(0, len(real)),
        st.lists(st.sampled_from(PIECES), max_size=4),
    )
    return st.one_of(
        st.binary(max_size=60),
        st.lists(st.sampled_from(PIECES), max_size=20).map(lambda parts: "".join(parts).encode()),
        cut.map(lambda c: (real[: c[0]] + "".join(c[2]) + real[c[1] :]).encode()),
    )


FIRST, FINAL = _client_messages()


@settings(max_examples=examples(300), deadline=None)
@given(_edited(FIRST), _edited(FINAL), st.booleans())
def test_any_scram_message_gets_the_protocols_answer(
    first: bytes, final: bytes, real_first: bool
) -> None:
    session = _session()
    assert session.handshake({"mechanism": MECHANISM})["error_code"] == ErrorCode.NONE
    answers: list[dict[str, Any]] = []
    for message in (FIRST.encode() if real_first else first, final):
        answers.append(session.authenticate({"auth_bytes": message}))
        if answers[-1]["error_code"] != ErrorCode.NONE:
            break
    codes = {answer["error_code"] for answer in answers}
    assert codes <= {ErrorCode.NONE, ErrorCode.SASL_AUTHENTICATION_FAILED}
    # the final message's proof is of the real first's nonces: none other passes
    assert not session.authenticated or (real_first and final == FINAL.encode())


@settings(max_examples=examples(300), deadline=None)
@given(
    st.one_of(
        st.binary(max_size=40),
        st.lists(st.sampled_from(["\x00", "alice", "s3cret-pw", "é", ""]), max_size=5).map(
            lambda parts: "".join(parts).encode()
        ),
    )
)
def test_any_plain_response_gets_the_protocols_answer(token: bytes) -> None:
    session = _session()
    assert session.handshake({"mechanism": "PLAIN"})["error_code"] == ErrorCode.NONE
    answer = session.authenticate({"auth_bytes": token})
    assert answer["error_code"] in (ErrorCode.NONE, ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert not session.authenticated or token in (
        b"\x00alice\x00s3cret-pw",
        b"alice\x00alice\x00s3cret-pw",
    )
