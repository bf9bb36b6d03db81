"""Per-channel assembly of basic.publish + content header + body frames.

The AMQP counterpart of RabbitMQ's rabbit_command_assembler, with its texts:
a frame out of order is 505 UNEXPECTED_FRAME (a connection error), a body
frame past the announced size 501 FRAME_ERROR, and an announced size above
the configured maximum is refused from the header, before any body is
buffered.

Half-received bodies are bounded per connection too: each content header reserves its
announced size in the connection's `BodyBudget` until the message is whole (or dropped),
so a client cannot make every channel hold a largest message whose body trickles in.
"""

from __future__ import annotations

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.errors import AmqpError, ReplyCode
from pulsar_gateway.handlers.amqp.events import ContentReceived
from pulsar_gateway.handlers.amqp.frames import BASIC_CLASS_ID, BodyFrame, Frame, HeaderFrame

# RabbitMQ's hard ceiling on max_message_size (?MAX_MSG_SIZE); at it, its text says "max
# size" instead of "configured max size".
RABBITMQ_MAX_MESSAGE_SIZE = 512 * 1024 * 1024


def method_ids(method: base.Frame) -> tuple[int, int]:
    """(class id, method id) of a pamqp method, for close frames."""
    return method.index >> 16, method.index & 0xFFFF


def unexpected(text: str, method: base.Frame | None = None) -> AmqpError:
    """A 505 UNEXPECTED_FRAME blaming `method` when there is one."""
    ids = method_ids(method) if method is not None else (0, 0)
    return AmqpError(ReplyCode.UNEXPECTED_FRAME, text, *ids)


class BodyBudget:
    """Bytes of message bodies one connection is still receiving, over all its channels.

    Content headers reserve their announced body size here and give it back when the
    message is whole or dropped: two integer updates per message, nothing per frame.
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


class ContentAssembler:
    """Collects one channel's content frames; at most one message at a time."""

    __slots__ = ("_max_size", "_budget", "_reserved", "_publish", "_header", "_body", "_remaining")

    def __init__(self, max_message_size: int, budget: BodyBudget | None = None) -> None:
        self._max_size = max_message_size
        self._budget = budget if budget is not None else BodyBudget(max_message_size)
        self._reserved = 0  # what this channel's message holds of the budget
        self._publish: commands.Basic.Publish | None = None
        self._header: HeaderFrame | None = None
        self._body: list[bytes] = []
        self._remaining = 0

    @property
    def idle(self) -> bool:
        """True when the next frame on the channel must be a method frame."""
        return self._publish is None

    def start(self, publish: commands.Basic.Publish) -> None:
        """A content-bearing method arrived; its header comes next."""
        self.reset()
        self._publish = publish

    def reset(self) -> None:
        """Forget the message in progress (whole, refused, or its channel closed)."""
        if self._reserved:
            self._budget.used -= self._reserved
            self._reserved = 0
        self._publish = None
        self._header = None
        self._body = []
        self._remaining = 0

    def add(self, frame: Frame) -> ContentReceived | None:
        """Take the next frame of the content; the message once it is whole."""
        publish = self._publish
        if publish is None:
            raise unexpected("expected method frame, got non method frame instead")
        if self._header is None:
            return self._add_header(publish, frame)
        return self._add_body(publish, self._header, frame)

    def _add_header(self, publish: commands.Basic.Publish, frame: Frame) -> ContentReceived | None:
        if not isinstance(frame, HeaderFrame) or frame.weight != 0:
            raise unexpected(
                f"expected content header for class {BASIC_CLASS_ID}, "
                "got non content header frame instead",
                publish,
            )
        if frame.class_id != BASIC_CLASS_ID:
            raise unexpected(
                f"expected content header for class {BASIC_CLASS_ID}, "
                f"got one for class {frame.class_id} instead",
                publish,
            )
        size = frame.body_size
        if size > self._max_size:
            self.reset()
            configured = "" if self._max_size == RABBITMQ_MAX_MESSAGE_SIZE else "configured "
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {size} is larger than {configured}max size {self._max_size}",
                *method_ids(publish),
            )
        if size == 0:
            return self._complete(frame, b"")
        budget = self._budget
        if budget.used + size > budget.limit:
            # Not RabbitMQ's (it has no such bound; its memory alarm would block every
            # publisher): the channel closes as for a too large message, the rest goes on.
            self.reset()
            raise AmqpError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {size} would take the message bodies this connection is "
                f"receiving to {budget.used + size} bytes, over the limit of {budget.limit} "
                "(amqp.max_incoming_body_bytes)",
                *method_ids(publish),
            )
        budget.used += size
        self._reserved = size
        self._header = frame
        self._remaining = size
        return None

    def _add_body(
        self, publish: commands.Basic.Publish, header: HeaderFrame, frame: Frame
    ) -> ContentReceived | None:
        if not isinstance(frame, BodyFrame):
            raise unexpected("expected content body, got non content body frame instead", publish)
        size = len(frame.payload)
        if size > self._remaining:
            raise AmqpError(
                ReplyCode.FRAME_ERROR,
                "content body frame exceeds remaining content size",
                *method_ids(publish),
            )
        self._body.append(frame.payload)
        self._remaining -= size
        if self._remaining:
            return None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        return self._complete(header, body)

    def _complete(self, header: HeaderFrame, body: bytes) -> ContentReceived:
        publish = self._publish
        assert publish is not None
        self.reset()
        return ContentReceived(
            header.channel,
            publish,
            header.properties or commands.Basic.Properties(),
            header.properties_raw,
            body,
        )
