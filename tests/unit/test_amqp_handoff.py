"""Handing an AMQP connection to its vhost's owner (docs/cluster.md, "AMQP on one port"):
the core's part (it stops at connection.open without answering), the frame filter that
drops the owner's second handshake, and the splice, on real loopback sockets."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands, frame

from harness.amqp_peer import connect, start_ok
from harness.cluster_view import FixedView, member
from harness.hypothesis_budget import examples
from pulsar_gateway.gateway.cluster.view import Member, SingleMemberView, vhost_key
from pulsar_gateway.handlers.amqp.broker_model import VhostAccess
from pulsar_gateway.handlers.amqp.connection_state import ConnectionState
from pulsar_gateway.handlers.amqp.events import ConnectionClosed, ConnectionHandedOff
from pulsar_gateway.handlers.amqp.frames import PROTOCOL_HEADER
from pulsar_gateway.handlers.amqp.handoff import (
    MAX_SKIPPED_FRAME,
    HandOffError,
    HandshakeRecorder,
    hand_off,
    is_handshake_answer,
    skip_handshake_answers,
)
from pulsar_gateway.handlers.amqp.vhost_owners import VhostOwners


def tuned(policy):  # type: ignore[no-untyped-def]
    peer = connect(policy=policy)
    peer.send(PROTOCOL_HEADER, start_ok())
    peer.send(commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=5))
    peer.frames()
    return peer


def test_a_vhost_served_elsewhere_is_handed_off_unanswered() -> None:
    peer = tuned(lambda user, vhost: VhostAccess.ELSEWHERE)
    channel_open = frame.marshal(commands.Channel.Open(), 1)
    events = peer.send(commands.Connection.Open(virtual_host="prod"), channel_open)
    assert events == [ConnectionHandedOff("prod")]
    assert peer.conn.handed_off and not peer.conn.closed
    assert peer.conn.state is ConnectionState.HANDED_OFF
    assert peer.frames() == []  # no open-ok: the owner answers
    # inert from now on: the channel.open above was not read, time does nothing
    assert peer.conn.tick(1000.0) == [] and peer.conn.data_to_send(1000.0) == b""
    assert peer.send(commands.Channel.Open(), channel=2) == []


def test_a_vhost_that_is_moving_is_closed_with_320() -> None:
    peer = tuned(lambda user, vhost: VhostAccess.MOVING)
    events = peer.send(commands.Connection.Open(virtual_host="prod"))
    [(channel, close)] = [(f.channel, f.method) for f in peer.frames()]
    assert channel == 0 and isinstance(close, commands.Connection.Close)
    assert close.reply_code == 320
    assert "moving" in close.reply_text
    assert [type(e) for e in events] == [ConnectionClosed]


def method_frame(method: object, channel: int = 0) -> bytes:
    return frame.marshal(method, channel)  # type: ignore[arg-type]


TUNE = commands.Connection.Tune(channel_max=0, frame_max=131072, heartbeat=0)
REFUSED = commands.Connection.Close(reply_code=530, reply_text="no", class_id=0, method_id=0)
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_handshake_answers_are_start_secure_tune_and_heartbeats() -> None:
    def parse(data: bytes) -> tuple[int, int, bytes]:
        kind, channel, size = struct.unpack(">BHI", data[:7])
        return kind, channel, data[7 : 7 + size]

    start = commands.Connection.Start(mechanisms="PLAIN", locales="en_US")
    for method in (start, commands.Connection.Secure(challenge=""), TUNE):
        assert is_handshake_answer(*parse(method_frame(method)))
    assert is_handshake_answer(*parse(HEARTBEAT))
    for method in (commands.Connection.OpenOk(), REFUSED):
        assert not is_handshake_answer(*parse(method_frame(method)))
    assert not is_handshake_answer(*parse(method_frame(commands.Channel.OpenOk(), 1)))


async def feed(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_skip_returns_the_answer_to_open_and_leaves_the_rest() -> None:
    async def run() -> tuple[bytes, bytes]:
        owner = b"".join(
            [
                method_frame(commands.Connection.Start(mechanisms="PLAIN", locales="en_US")),
                method_frame(commands.Connection.Tune(frame_max=131072)),
                HEARTBEAT,
                method_frame(commands.Connection.OpenOk()),
                method_frame(commands.Channel.OpenOk(), 1),
            ]
        )
        reader = await feed(owner)
        answer = await skip_handshake_answers(reader)
        return answer, await reader.read()

    answer, rest = asyncio.run(run())
    assert answer == method_frame(commands.Connection.OpenOk())
    assert rest == method_frame(commands.Channel.OpenOk(), 1)


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=2048))
def test_skip_on_arbitrary_owner_bytes_ends_with_an_answer_or_an_error(data: bytes) -> None:
    """Whatever comes back, the filter returns one frame, or raises one of its errors, and
    never reads a frame larger than its bound."""

    async def run() -> None:
        reader = await feed(data)
        try:
            answer = await skip_handshake_answers(reader)
        except (HandOffError, asyncio.IncompleteReadError):
            return
        kind, channel, size = struct.unpack(">BHI", answer[:7])
        assert len(answer) == size + 8 and answer[-1] == 0xCE
        assert not is_handshake_answer(kind, channel, answer[7:-1])

    asyncio.run(run())


def test_skip_refuses_an_oversized_frame() -> None:
    async def run() -> None:
        reader = await feed(struct.pack(">BHI", 1, 0, MAX_SKIPPED_FRAME + 1))
        await skip_handshake_answers(reader)

    with pytest.raises(HandOffError):
        asyncio.run(run())


@given(st.lists(st.binary(min_size=1, max_size=5000), max_size=30))
def test_the_recorder_keeps_everything_or_gives_up_past_its_bound(chunks: list[bytes]) -> None:
    recorder = HandshakeRecorder(limit=20_000)
    for chunk in chunks:
        recorder.record(chunk)
    total = b"".join(chunks)
    if len(total) <= 20_000:
        assert recorder.data == total and not recorder.overflowed
    else:
        assert recorder.overflowed and recorder.data == b""


ME = Member("host/0", 0, "127.0.0.1", 9092, "127.0.0.1", 1, 9404)


def test_a_single_member_serves_every_vhost() -> None:
    owners = VhostOwners(SingleMemberView(ME), 1.0)
    assert owners.route("any", member_to_member=False) is None
    assert asyncio.run(owners.target("any")) == ME


def test_routes_when_not_served_here() -> None:
    me, other = member("host/0", 0), member("host/1", 1)
    view = FixedView(me, [other])
    vhost = next(f"v{i}" for i in range(1000) if view.owner(vhost_key(f"v{i}")) == other)
    owners = VhostOwners(view, 0.2)
    assert owners.route(vhost, member_to_member=False) is VhostAccess.ELSEWHERE
    # a handed-over connection is never passed on: two members that disagree for a moment
    # cannot bounce it between them
    assert owners.route(vhost, member_to_member=True) is VhostAccess.MOVING
    assert asyncio.run(owners.target(vhost)) == other
    # owned by me but not served (a stale lease): nobody to hand it to, after the wait
    mine = next(f"m{i}" for i in range(1000) if view.owner(vhost_key(f"m{i}")) == me)
    assert owners.route(mine, member_to_member=False) is None
    view.set_members([other], serving=False)
    assert owners.route(mine, member_to_member=True) is VhostAccess.MOVING
    assert asyncio.run(owners.target(mine)) is None


def test_hand_off_replays_filters_and_splices_both_ways() -> None:
    """A fake owner on a real socket: it must get the recorded bytes first, the client must
    get the owner's open-ok and nothing before it, and then bytes flow both ways."""

    async def run() -> tuple[bytes, bytes, bytes]:
        replayed = PROTOCOL_HEADER + b"handshake bytes"
        got_by_owner = bytearray()

        async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got_by_owner.extend(await reader.readexactly(len(replayed)))
            writer.write(
                method_frame(commands.Connection.Start(mechanisms="PLAIN", locales="en_US"))
                + method_frame(TUNE)
                + method_frame(commands.Connection.OpenOk())
            )
            got_by_owner.extend(await reader.readexactly(5))  # the client's "after"
            writer.write(b"reply")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(owner, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client_side = asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await client_side.put((reader, writer))

        front = await asyncio.start_server(accepted, "127.0.0.1", 0)
        front_port = front.sockets[0].getsockname()[1]
        client_reader, client_writer = await asyncio.open_connection("127.0.0.1", front_port)
        proxied = await client_side.get()
        relay = asyncio.ensure_future(hand_off(replayed, proxied, "127.0.0.1", port, 5.0))
        open_ok = method_frame(commands.Connection.OpenOk())
        first = await client_reader.readexactly(len(open_ok))
        client_writer.write(b"after")
        await client_writer.drain()
        rest = await client_reader.read()  # until the owner closes, which ends the splice
        await asyncio.wait_for(relay, 5)
        client_writer.close()
        server.close()
        front.close()
        return first, rest, bytes(got_by_owner)

    first, rest, got = asyncio.run(run())
    assert first == method_frame(commands.Connection.OpenOk())
    assert rest == b"reply"
    assert got == PROTOCOL_HEADER + b"handshake bytes" + b"after"
