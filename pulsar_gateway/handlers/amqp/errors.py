"""AMQP reply codes and the one exception type the AMQP core raises.

Every protocol violation becomes an `AmqpError` carrying the reply code and the
explanation RabbitMQ would give, so the connection answers with the right
connection.close or channel.close instead of dying, and clients that match on
RabbitMQ's reply texts keep working.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    """AMQP 0-9-1 reply codes; the names are the texts RabbitMQ prefixes."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


# The spec's "soft-error" class: these close one channel, every other code closes
# the whole connection.
SOFT_ERRORS = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)

MAX_REPLY_TEXT = 255  # reply-text is a shortstr


class AmqpError(Exception):
    """A protocol error with the reply code and explanation to send back.

    `class_id`/`method_id` name the method that caused it (0 when no method is
    to blame, e.g. a malformed frame). Whether it closes a channel or the
    connection follows the spec's hard/soft split, as RabbitMQ does.
    """

    def __init__(
        self,
        reply_code: int,
        explanation: str,
        class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        super().__init__(f"{_name(reply_code)} - {explanation}")
        self.reply_code = int(reply_code)
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def hard(self) -> bool:
        """True when the spec says this code closes the connection."""
        return self.reply_code not in SOFT_ERRORS

    @property
    def reply_text(self) -> str:
        """RabbitMQ's "NAME - explanation", cut to 255 bytes with "..."."""
        text = f"{_name(self.reply_code)} - {self.explanation}".encode()
        if len(text) > MAX_REPLY_TEXT:
            text = text[: MAX_REPLY_TEXT - 3] + b"..."
        return text.decode("utf-8", "ignore")

    def blame(self, class_id: int, method_id: int) -> AmqpError:
        """Attach the offending method when the raiser did not know it."""
        if not self.class_id and not self.method_id:
            self.class_id = class_id
            self.method_id = method_id
        return self

    def __repr__(self) -> str:
        return (
            f"AmqpError({self.reply_code}, {self.explanation!r}, "
            f"class_id={self.class_id}, method_id={self.method_id})"
        )


def _name(reply_code: int) -> str:
    try:
        return ReplyCode(reply_code).name
    except ValueError:
        return "INTERNAL_ERROR"


def resource(kind: str, name: str, vhost: str) -> str:
    """rabbit_misc:rs/1: "queue 'q' in vhost '/'"."""
    return f"{kind} '{name}' in vhost '{vhost}'"


def not_found(kind: str, name: str, vhost: str) -> AmqpError:
    """RabbitMQ's 404 for a missing entity: "no queue 'q' in vhost '/'"."""
    return AmqpError(ReplyCode.NOT_FOUND, f"no {resource(kind, name, vhost)}")
