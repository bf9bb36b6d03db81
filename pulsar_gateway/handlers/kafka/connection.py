"""One Kafka connection: frames read in, requests run as tasks, responses written in order.

Kafka clients pipeline requests and expect responses in the order they sent the requests,
so each request runs as its own task while a writer task answers them strictly in order
(server.py accepts the socket and hands it here). What one connection may hold is bounded
(docs/security.md, conf/gateway.toml):

- memory: a frame's bytes are taken from the connection's and the listener's queued-bytes
  budgets once its header says what it is, its decoded size is added once known, and all of
  it is given back when the response has been written, and whatever is still held when the
  connection ends, however it ends (end of stream, a timeout, a client that stopped reading).
- time: a frame that stops arriving, a client that stops reading its answers
  (`frame_timeout_seconds`), an idle connection (`connection_idle_seconds`), and, with SASL,
  one that has not logged in within `login_timeout_seconds` is closed.
- before login (SASL on): frames above `max_unauthenticated_frame_bytes` close the
  connection, as Kafka's sasl.server.max.receive.size does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import struct
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any

from pulsar_gateway.gateway import metrics
from pulsar_gateway.handlers.authorization import peer_text
from pulsar_gateway.handlers.kafka.body_reader import BodyReader
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.requests import (
    ENTRY_BYTES,
    Answer,
    ConnectionClosing,
    DecodedRequest,
    admit,
    answer_size,
    charge_produce,
    decode_off_loop,
    droppable,
    respond,
)
from pulsar_gateway.handlers.kafka.sasl import SaslSession
from pulsar_gateway.handlers.listener_limits import ByteBudget
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey
from pulsar_gateway.security.credentials import NoUsers, shown

log = logging.getLogger("gateway.kafka")

_SIZE = struct.Struct(">i")
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection
_API_KEY = struct.Struct(">h")  # a request header's first field
# a Produce frame at least this big is read into one buffer of its size (`_read_body`)
BIG_BODY = 64 * 1024
MAX_PIPELINED = 64
WRITE_BUFFER_HIGH = 1 << 20
# The watchdog fired this much later than asked: the loop did not run meanwhile (a loaded
# machine), so bytes a client sent may be waiting unread; judged again once they are read.
WATCH_LATE_SECONDS = 0.5
SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


class _Idle(Exception):
    """Nothing came in or went out for connection_idle_seconds: close quietly."""


class KafkaConnection:
    def __init__(
        self,
        context: KafkaContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: Any,
        queued: ByteBudget,
        decoder: Executor,
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.queued = queued
        self.decoder = decoder
        self.responses: asyncio.Queue[tuple[asyncio.Task[Answer | None], int] | None] = (
            asyncio.Queue(MAX_PIPELINED)
        )
        self.loop = asyncio.get_running_loop()
        self.unanswered = 0  # requests read whose response is not written yet
        self.writer_gone = False
        # the watchdog's view: a frame begun and not complete (since when, until when)
        now = self.loop.time()
        self.last_activity = now  # a frame read or a response written
        self.last_progress = now  # bytes of the frame under way
        self.mid_frame = False
        self.frame_started = float("inf")  # the body under way: since when, bytes so far
        self.frame_received = 0
        self.timed_out: Exception | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._watch_due = now  # when the watchdog should next run
        self.sasl = SaslSession((), NoUsers(), peer)
        # reads not yet answered (`droppable`): a long poll for a client that has gone is
        # dropped, not waited out (it would keep its partitions from closing for up to its
        # max_wait), and so is a 99,999-topic Metadata (it held its budget for seconds)
        self._fetches: set[asyncio.Task[Answer | None]] = set()
        # one Fetch at a time: the last one's answer written (`_fetch_in_turn`)
        self._last_fetch_written: asyncio.Future[None] | None = None
        self._written_when: dict[asyncio.Task[Answer | None], asyncio.Future[None]] = {}
        self._reading: asyncio.Task[None] | None = None
        self.opened = now
        # SASL on: until the first login, smaller frames and budget, and a deadline;
        # on_login tells the listener (its count of connections before login per address)
        self._login_limits = False
        self.on_login: Callable[[], None] | None = None

    async def serve(self) -> None:
        """Read and answer until the connection ends, then give back every byte it holds.

        The reader runs as its own task so that the writer can stop it wherever it waits
        (for bytes, for room in a budget, for room in the response queue) when the client
        stops reading its answers: a reader left waiting for room that only the stopped
        writer would have made kept its bytes and its connection slot for ever."""
        if self.before_login:
            # a stranger may hold no more than one frame of the size it may send
            self._login_limits = True
            self.queued.limit = min(
                self.queued.limit, self.settings.max_unauthenticated_frame_bytes
            )
        writer_task = asyncio.create_task(self._write_responses())
        reading = asyncio.create_task(self._read_requests())
        self._reading = reading
        self._watch()
        try:
            await reading
        except (asyncio.IncompleteReadError, ConnectionError):
            # the end of the stream, or the watchdog's doing: nobody will read an answer
            self._drop_fetches()
            if isinstance(self.timed_out, _Idle):
                log.debug("closing idle Kafka connection from %s", self.peer)
            elif self.timed_out is not None:
                log.warning("closing Kafka connection from %s: %s", self.peer, self.timed_out)
        except ConnectionClosing as reason:
            log.warning("closing Kafka connection from %s: %s", self.peer, reason)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the listener is stopping (the finally below still runs)
            self._drop_fetches()  # the writer stopped the reader: nobody reads answers
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            reading.cancel()
            with contextlib.suppress(asyncio.QueueFull):
                self.responses.put_nowait(None)
            try:
                await asyncio.wait_for(writer_task, 30)
            except (TimeoutError, asyncio.CancelledError, Exception):
                writer_task.cancel()
            self.writer.close()
            self._discard_answers()  # a writer stopped by the timeout above left some
            self.queued.release_all()
            # the reader's task holds the exception that ended it, whose traceback holds
            # the reader's frames, which hold this connection: a cycle that only a full
            # garbage collection (rare, with the start-up heap frozen) would free
            del reading
            self._reading = None

    def _drop_fetches(self) -> None:
        for fetch in self._fetches:
            fetch.cancel()

    async def _read_requests(self) -> None:
        while True:
            await self._wait_out_throttle()
            await self._read_request()
            if self.writer_gone or self.sasl.failed:
                return  # after a SASL failure: its answer goes out, then the connection closes
            # one frame per turn of the loop: a connection whose socket holds many frames
            # read them all in one go before, and ten such pipelining cheap requests made
            # each turn of the loop ~300 ms of work, which every other client waited out
            await asyncio.sleep(0)

    async def _read_request(self) -> None:
        """One frame read, decoded and handed to its task. A method of its own so that the
        frame and its decoded request die with this call: kept as locals of the reading
        loop, they outlived their answer while the loop waited for the next frame (a 99,999-
        topic Metadata: 25 MB per idle connection, outside every budget), and for as long
        as the connection's end, a traceback holding that frame, waited for a full garbage
        collection."""
        max_entries = self.settings.max_request_entries
        size = _SIZE.unpack(await self._read_exactly(4))[0]
        self._check_size(size)
        # the header's fixed start (API key, version, correlation id) before any budget
        # is taken: what the frame is decides whether it is read at all (before login,
        # only ApiVersions and SASL are)
        start = await self._read_exactly(8)
        api_key = _API_KEY.unpack_from(start)[0]
        if api_key not in SASL_APIS and not self.sasl.current:
            self._refuse_unauthenticated(api_key)
        # backpressure: with the budget full, the socket is not read until answers go
        # out (and the watchdog does not count that wait against the client)
        self.mid_frame = False
        await self.queued.acquire(size)
        held = size
        try:
            frame = memoryview(await self._read_body(size, start, api_key == ApiKey.PRODUCE))
            # a frame of megabytes (joined from its chunks, then decoded: copied again) is
            # decoded in a turn of its own (loop_turns.py, `after_bytes`)
            await self.context.turns.after_bytes(size)
            try:
                header = protocol.parse_request_header(frame)
            except protocol.KafkaDecodeError as exc:
                metrics.BAD_INPUT.labels("kafka", "header").inc()
                raise ConnectionClosing(f"bad request header: {exc}") from None
            request = await decode_off_loop(header, frame, max_entries, self.decoder)
            decoded = request.entries * ENTRY_BYTES
            self.queued.charge(decoded)
            held += decoded
        except BaseException:
            self.queued.release(held)
            raise
        self.last_activity = self.loop.time()
        self.unanswered += 1
        task: asyncio.Task[Answer | None]
        if header.api_key in SASL_APIS:
            # settled before the next frame is read (which may depend on it), in a
            # thread: PLAIN's PBKDF2 takes ~2 ms, which the other connections would wait
            # out on the event loop during a storm of logins
            answer = await asyncio.to_thread(self._sasl, request)
            self._take_rights()
            task = asyncio.create_task(_ready(answer))
        else:
            # a Produce over its quota mutes the connection before the next read
            throttle = charge_produce(self.context, request)
            turn = admit(self.context, request)  # its place in the connection's line
            answer_of = respond(self.context, request, throttle, turn)
            if header.api_key == ApiKey.FETCH:
                task = self._fetch_in_turn(answer_of)
            else:
                task = asyncio.create_task(answer_of)
                if droppable(header.api_key, request.body):
                    self._fetches.add(task)
                    task.add_done_callback(self._fetches.discard)
        await self.responses.put((task, held))

    def _fetch_in_turn(
        self, answer_of: Coroutine[Any, Any, Answer | None]
    ) -> asyncio.Task[Answer | None]:
        """A Fetch's task, which starts once the connection's previous Fetch has been
        written out. A Fetch request is a hundred bytes and its answer up to megabytes:
        pipelined (64 at a time) by connections that never read, their answers were all
        built at once (hundreds of MB, a backlog for the encoding thread) however small the
        requests' budget; a client sends one Fetch per connection at a time anyway."""
        previous, written = self._last_fetch_written, self.loop.create_future()
        self._last_fetch_written = written

        async def in_turn() -> Answer | None:
            if previous is not None:
                await asyncio.wait([previous])  # however it ended
            return await answer_of

        task = asyncio.create_task(in_turn())
        self._fetches.add(task)
        self._written_when[task] = written

        def done(_: asyncio.Task[Answer | None]) -> None:
            self._fetches.discard(task)
            answer_of.close()  # never started when the wait was cancelled

        task.add_done_callback(done)
        return task

    def _written(self, task: asyncio.Task[Answer | None]) -> None:
        """The task's answer is out (or never will be): its connection's next Fetch may go."""
        written = self._written_when.pop(task, None)
        if written is not None and not written.done():
            written.set_result(None)

    async def _wait_out_throttle(self) -> None:
        """A client over its quota is not read from until its throttle time has passed
        (KIP-219's muted channel; docs/quotas.md). The idle timer does not count the wait."""
        mute = self.context.mute
        if mute is None:
            return
        while (left := mute.until - self.loop.time()) > 0:
            await asyncio.sleep(left)
            self.last_activity = self.loop.time()

    def _take_rights(self) -> None:
        """Once a user has authenticated, this connection's requests run with its rights:
        a copy of the listener's context with the user's `access`; the first time, the
        limits of a connection before login are lifted."""
        user = self.sasl.authenticated
        if not user or self.sasl.failed or self.context.access.user == user:
            return
        if self._login_limits:
            self._login_limits = False
            self.queued.limit = self.settings.max_queued_request_bytes_per_connection
            if self.on_login is not None:
                self.on_login()
        access = self.context.authorizer.bound("kafka", peer_text(self.peer), user)
        self.context = dataclasses.replace(self.context, access=access)

    def _sasl(self, request: DecodedRequest) -> bytes:
        """Answered here, in order with the frames read: the next frame may depend on it.
        Runs in a worker thread while the connection's reader waits for it, so nothing else
        touches the SASL state meanwhile."""
        header, body = request.header, request.body
        assert body is not None
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            answer = self.sasl.handshake(body)
        else:
            answer = self.sasl.authenticate(body)
        return protocol.encode_response(
            header.api_key, header.api_version, header.correlation_id, answer
        )

    def _refuse_unauthenticated(self, api_key: int) -> None:
        """Kafka closes a connection that sends anything but ApiVersions before SASL (here
        from the header's first bytes: the body is never read)."""
        if api_key == ApiKey.API_VERSIONS:
            return
        metrics.BAD_INPUT.labels("kafka", "unauthenticated").inc()
        name = protocol.API_NAMES.get(api_key, "unknown")
        user = self.sasl.authenticated
        if user and self.sasl.credentials_changed and not self.sasl.expired:
            metrics.AUTHENTICATIONS.labels("kafka", "none", "revoked").inc()
            raise ConnectionClosing(
                f"{name}: user '{shown(user)}' was removed or its password changed since it "
                "authenticated"
            )
        if user:  # KIP-368: not re-authenticated in time
            metrics.AUTHENTICATIONS.labels("kafka", "none", "expired").inc()
            raise ConnectionClosing(
                f"{name} after the SASL session of '{self.sasl.authenticated}' expired "
                "(kafka.sasl_session_lifetime_ms)"
            )
        metrics.AUTHENTICATIONS.labels("kafka", "none", "failure").inc()
        raise ConnectionClosing(f"{name} before SASL authentication (kafka.sasl_mechanisms is set)")

    def _check_size(self, size: int) -> None:
        """The frame's size against `max_frame_bytes`, and before login (SASL on, not yet
        authenticated) against `max_unauthenticated_frame_bytes` (Kafka's
        sasl.server.max.receive.size): a stranger's frames stay small."""
        limit, setting, reason = self.settings.max_frame_bytes, "max_frame_bytes", "frame_size"
        if self.before_login and self.settings.max_unauthenticated_frame_bytes < limit:
            limit = self.settings.max_unauthenticated_frame_bytes
            setting, reason = "max_unauthenticated_frame_bytes", "unauthenticated_frame_size"
        if size < 8 or size > limit:
            metrics.BAD_INPUT.labels("kafka", reason).inc()
            raise ConnectionClosing(f"frame of {size} bytes (limit {limit}, kafka.{setting})")

    @property
    def before_login(self) -> bool:
        """SASL is on and this connection has not authenticated yet."""
        return self.sasl.required and not self.sasl.authenticated

    async def _read_body(
        self, size: int, start: bytes, produce: bool
    ) -> bytes | bytearray | memoryview:
        """The frame (``start``: its first bytes, already read), which must also keep
        arriving at kafka.min_frame_bytes_per_second (`_too_slow`). A big Produce is read
        into one buffer of its size (body_reader.py: its bytes copied once, not four times);
        only a Produce, whose decode never holds its blobs as keys, gets a mutable frame."""
        now = self.loop.time()
        self.last_progress = now
        self.mid_frame = True
        self.frame_started = now
        self.frame_received = len(start)
        grace = self.settings.frame_grace_seconds
        if self._watchdog is not None and self._watch_due > now + grace:
            # judged at the end of its grace, not at the watchdog's slower idle pace
            self._watchdog.cancel()
            self._watch_due = now + grace
            self._watchdog = self.loop.call_later(grace, self._watch)
        try:
            if produce and size >= BIG_BODY and isinstance(self.reader, BodyReader):
                frame = self.context.bodies.take(size)  # (a reused buffer: BodyBuffers)
                frame[: len(start)] = start
                await self.reader.read_into(frame, len(start), self._progress)
                return frame
            return await self._read_exactly(size - len(start), start)
        finally:
            self.mid_frame = False
            self.frame_started = float("inf")

    def _progress(self, received: int) -> None:
        """A frame's bytes so far (`BodyReader.read_into`), for the watchdog."""
        self.frame_received = received
        self.last_progress = self.loop.time()
        self.mid_frame = True

    def _too_slow(self, now: float) -> bool:
        """After frame_grace_seconds, a frame's bytes so far must average
        min_frame_bytes_per_second over the time since: a frame whose size was taken from
        the budget and whose bytes trickle in (a byte every 20 s) would otherwise hold
        that budget for as long as frame_timeout_seconds allows between bytes."""
        late = now - self.frame_started - self.settings.frame_grace_seconds
        return late > 0 and self.frame_received < late * self.settings.min_frame_bytes_per_second

    async def _read_exactly(self, n: int, start: bytes = b"") -> bytes:
        """``n`` bytes (after ``start``). No timer per read (it cost 12% of a small
        Produce): the watchdog closes the socket under a read that waits too long, and the
        read then ends here."""
        chunks: list[bytes] = [start] if start else []
        left = n
        while left:
            chunk = await self.reader.read(left)
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(chunks), n + len(start))
            chunks.append(chunk)
            left -= len(chunk)
            self.frame_received += len(chunk)
            self.last_progress = self.loop.time()
            self.mid_frame = True  # from the first byte of a size prefix on
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _watch(self) -> None:
        """Every quarter of the shortest timeout: close a connection whose frame stalled
        (frame_timeout_seconds without a byte, or the body too slow overall), that has not
        logged in within login_timeout_seconds (SASL on), or that has been idle
        (connection_idle_seconds with no request outstanding: a long-poll Fetch or a
        Produce waiting for storage is not idleness, and the clock restarts at its answer)."""
        settings = self.settings
        stall = settings.frame_timeout_seconds
        login = settings.login_timeout_seconds
        now = self.loop.time()
        reason: Exception | None = None
        label = "frame_timeout"
        if now - self._watch_due > WATCH_LATE_SECONDS:
            # the loop stalled: what the client sent meanwhile is read (a poll of the
            # sockets comes before the next timers) before judging it
            self._watch_due = now + 0.05
            self._watchdog = self.loop.call_later(0.05, self._watch)
            return
        if self.mid_frame and now - self.last_progress >= stall:
            reason = ConnectionClosing(
                f"frame stalled: no bytes for {stall:g} s (kafka.frame_timeout_seconds)"
            )
        elif self.mid_frame and self._too_slow(now):
            reason = ConnectionClosing(
                f"frame arriving under {settings.min_frame_bytes_per_second} B/s after "
                f"{settings.frame_grace_seconds:g} s (kafka.min_frame_bytes_per_second, "
                "kafka.frame_grace_seconds)"
            )
        elif self.before_login and now - self.opened >= login:
            reason = ConnectionClosing(
                f"not authenticated within {login:g} s (kafka.login_timeout_seconds)"
            )
            label = "login_timeout"
        elif (
            not self.mid_frame
            and not self.unanswered
            and now - self.last_activity >= settings.connection_idle_seconds
        ):
            reason = _Idle()
        if reason is None:
            shortest = min(stall, settings.connection_idle_seconds)
            if self.before_login:
                shortest = min(shortest, login)
            if self.mid_frame:
                shortest = min(shortest, settings.frame_grace_seconds)
            wait = max(0.05, shortest / 4)
            self._watch_due = now + wait
            self._watchdog = self.loop.call_later(wait, self._watch)
            return
        if isinstance(reason, ConnectionClosing):
            metrics.BAD_INPUT.labels("kafka", label).inc()
        self.timed_out = reason
        self.writer.close()  # the pending read sees the end of the stream

    async def _write_responses(self) -> None:
        """Answer the requests in the order they came. The answers that are ready together
        (several produce appends numbered by one read of receipts) go to the socket in one
        write: a write to a loopback socket also runs the client's side of the network
        stack, and a write per answer was a tenth of the gateway's produce time (py-spy).
        Nothing waits while answers are held (`out` is written before every await), so
        what `_written` and the byte budget promise still holds."""
        # answers ready, not yet handed to the socket (a Fetch answer in several buffers)
        out: list[bytes | bytearray | memoryview] = []
        while True:
            try:
                item = self.responses.get_nowait()
            except asyncio.QueueEmpty:
                if not await self._write_out(out):
                    return self._stop_writing(unread=True)
                item = await self.responses.get()
            if item is None:
                await self._write_out(out)
                return
            task, held = item
            if not task.done() and not await self._write_out(out):
                return self._stop_writing(unread=True)
            try:
                response = await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this writer is being stopped
                response = None  # a Fetch dropped because its client went away
            except ConnectionClosing as reason:
                log.warning("closing Kafka connection from %s: %s", self.peer, reason)
                await self._write_out(out)
                return self._stop_writing()
            except Exception:
                log.exception("request from %s failed; closing its connection", self.peer)
                await self._write_out(out)
                return self._stop_writing()
            if response is not None:
                if isinstance(response, bytes):
                    out.append(response)
                else:
                    out += response
                if answer_size(out) > WRITE_BUFFER_HIGH and not await self._write_out(out):
                    return self._stop_writing(unread=True)
            self._written(task)
            # given back once handed to the socket (next, before any wait): a client that
            # does not read its answers is throttled
            self.queued.release(held)
            self.unanswered -= 1
            self.last_activity = self.loop.time()
            # not kept while the next answer is awaited: a Metadata's is megabytes
            del task, response

    async def _write_out(self, out: list[bytes | bytearray | memoryview]) -> bool:
        """The held answers to the socket, in order (emptied); False if the client then
        read nothing for frame_timeout_seconds with over WRITE_BUFFER_HIGH queued."""
        if not out:
            return True
        if len(out) == 1:
            self.writer.write(out[0])
        else:
            self.writer.writelines(out)
        out.clear()
        if self.writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH:
            return await self._drained()
        return True

    async def _drained(self) -> bool:
        """Wait for the client to read; False if it read nothing for frame_timeout_seconds
        (it would hold its queued bytes, and this writer, for ever)."""
        stall = self.settings.frame_timeout_seconds
        try:
            async with asyncio.timeout(stall):
                await self.writer.drain()
            return True
        except TimeoutError:
            log.warning(
                "closing Kafka connection from %s: it read none of its responses for %g s",
                self.peer,
                stall,
            )
        except ConnectionError:
            pass
        return False

    def _stop_writing(self, unread: bool = False) -> None:
        """Close, and stop the reader wherever it waits: `serve` then gives back what the
        connection holds (the queued requests' bytes included) and its slot. `unread`: the
        client reads nothing, so what is still to be written is dropped and the connection
        reset (a plain close waits to write it first, and the kernel keeps an orphaned
        socket trying to: the connection and its buffers stayed for as long as the client
        liked, outside the connection limits)."""
        self.writer_gone = True
        if unread:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                # ValueError: the client reset it first (its descriptor is gone); the
                # writer task died of it, and the reader was never stopped
                with contextlib.suppress(OSError, ValueError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self.writer.transport.abort()
        else:
            self.writer.close()
        self._discard_answers()
        if self._reading is not None:
            self._reading.cancel()

    def _discard_answers(self) -> None:
        """Forget the answers nobody will write. Their requests run on (a produce's append
        is not cut in half), and an error one ends with is read when it ends: asyncio logs
        a task's unread error at ERROR, and a hostile client's Fetch that failed after its
        connection was reset was logged so."""
        while not self.responses.empty():
            item = self.responses.get_nowait()
            if item is not None:
                item[0].add_done_callback(_read_outcome)


def _read_outcome(task: asyncio.Task[Answer | None]) -> None:
    if not task.cancelled():
        task.exception()


async def _ready(response: bytes) -> bytes:
    return response
