"""The signed origin of an AMQP hand-off (docs/cluster.md, "AMQP on one port").

The member that accepted a client tells the vhost's owner what only it could see: the
client's address (guest logs in from loopback only) and its TLS certificate's name
(EXTERNAL). The owner believes it only with the members' shared secret's tag, young, and
once: anything else on the member port is refused before a byte of AMQP is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulsar_gateway.handlers.amqp.handoff import (
    ORIGIN_MAGIC,
    HandOffError,
    Origin,
    OriginVerifier,
    sign_origin,
)

SECRET = b"shared by the members"


def _read(verifier: OriginVerifier, data: bytes) -> Origin:
    async def run() -> Origin:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await verifier.read(reader)

    return asyncio.run(run())


def test_a_signed_origin_is_read_back_and_the_amqp_bytes_after_it_stay() -> None:
    origin = Origin("127.0.0.1", "frank")

    async def run() -> tuple[Origin, bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(sign_origin(SECRET, origin) + b"AMQP\x00\x00\x09\x01")
        reader.feed_eof()
        got = await OriginVerifier(SECRET).read(reader)
        return got, await reader.read()

    assert asyncio.run(run()) == (origin, b"AMQP\x00\x00\x09\x01")


def test_another_secret_a_changed_fact_or_no_origin_is_refused() -> None:
    signed = sign_origin(SECRET, Origin("10.0.0.7", None))
    with pytest.raises(HandOffError, match="does not verify"):
        _read(OriginVerifier(b"another secret"), signed)
    forged = signed.replace(b"10.0.0.7", b"127.0.0.1")
    with pytest.raises(HandOffError, match="does not verify"):
        _read(OriginVerifier(SECRET), forged)
    with pytest.raises(HandOffError, match="no signed origin"):
        _read(OriginVerifier(SECRET), b"AMQP\x00\x00\x09\x01" + b"\x00" * 64)


def test_an_origin_is_accepted_once_and_only_while_young() -> None:
    verifier = OriginVerifier(SECRET)
    signed = sign_origin(SECRET, Origin("127.0.0.1", "frank"))
    _read(verifier, signed)
    with pytest.raises(HandOffError, match="replayed"):
        _read(verifier, signed)  # recorded off the member network and sent again

    facts = json.dumps(
        {"peer": "127.0.0.1", "cn": None, "at": time.time() - 3600, "nonce": "n"}
    ).encode()
    tag = hmac.new(SECRET, facts, hashlib.sha256).digest()
    old = ORIGIN_MAGIC + struct.pack(">H", len(facts)) + facts + tag
    with pytest.raises(HandOffError, match="too old"):
        _read(OriginVerifier(SECRET), old)


@given(data=st.binary(max_size=300))
def test_hostile_bytes_on_the_member_port_never_pass_as_an_origin(data: bytes) -> None:
    try:
        _read(OriginVerifier(SECRET), ORIGIN_MAGIC + data)
    except (HandOffError, asyncio.IncompleteReadError):
        return
    raise AssertionError("unsigned bytes were taken for an origin")
