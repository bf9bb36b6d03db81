"""Validation of queue.declare arguments, as RabbitMQ 3.10 does it.

Clients rely on a bad `x-max-length` or `x-message-ttl` failing at declare
time (406 with RabbitMQ's text) rather than being ignored, and on a redeclare
with different arguments failing the equivalence check. Queue types here are
"classic" and "quorum" (both stored as one Pulsar topic with a subscription) and
"stream" (an append-only Pulsar topic read from offsets: stream_engine.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulsar_gateway.handlers.amqp.field_values import (
    describe,
    is_int,
    is_string,
    same_value,
    type_name,
)

QUEUE_TYPES = {
    "classic": "rabbit_classic_queue",
    "quorum": "rabbit_quorum_queue",
    "stream": "rabbit_stream_queue",
}
MAX_EXPIRY_MS = 315_360_000_000  # ten years, RabbitMQ's rabbit_misc:check_expiry
MAX_PRIORITY = 255
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
QUEUE_MODES = ("default", "lazy")
LEADER_LOCATORS = ("client-local", "balanced")

# Arguments each queue type understands (RabbitMQ's queue_arguments capability);
# one known to some type but not to this one is refused.
TYPE_ARGUMENTS: Mapping[str, tuple[str, ...]] = {
    "classic": (
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-queue-version",
        "x-single-active-consumer",
        "x-queue-type",
        "x-queue-master-locator",
    ),
    "quorum": (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator",
    ),
    "stream": (
        "x-max-length-bytes",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
        "x-queue-type",
    ),
}
_ALL_TYPED_ARGUMENTS = frozenset({name for names in TYPE_ARGUMENTS.values() for name in names})

Check = Callable[[Any, Mapping[str, Any]], str | None]

# What the gateway does with each queue argument it knows, for `check_supported_arguments`
# and the compatibility matrix (docs/compatibility.md): "enforced" acts as RabbitMQ does,
# "accepted" is validated and stored but changes nothing here (the note says why that is
# harmless or what differs), "refused" fails the declare with 406 rather than pretend.
ENFORCED, ACCEPTED, REFUSED = "enforced", "accepted", "refused"
ARGUMENT_SUPPORT: Mapping[str, tuple[str, str]] = {
    "x-expires": (ENFORCED, "an unused queue is deleted after this many ms"),
    "x-message-ttl": (ENFORCED, "expired heads are dropped or dead-lettered (reason expired)"),
    "x-dead-letter-exchange": (ENFORCED, "rejected, expired and maxlen messages"),
    "x-dead-letter-routing-key": (ENFORCED, ""),
    "x-dead-letter-strategy": (ACCEPTED, "dead-lettering is always at-least-once here"),
    "x-max-length": (ENFORCED, "counts ready messages, as RabbitMQ"),
    "x-max-length-bytes": (ENFORCED, "counts ready body bytes, as RabbitMQ"),
    "x-max-in-memory-length": (ACCEPTED, "messages live in Pulsar, not in gateway memory"),
    "x-max-in-memory-bytes": (ACCEPTED, "messages live in Pulsar, not in gateway memory"),
    "x-max-priority": (ENFORCED, "higher priority first (up to 255), see below"),
    "x-overflow": (ENFORCED, "drop-head, reject-publish, reject-publish-dlx"),
    "x-queue-mode": (ACCEPTED, "every queue is stored in Pulsar (lazy by nature)"),
    "x-queue-version": (ACCEPTED, "storage is one Pulsar topic per queue"),
    "x-single-active-consumer": (ENFORCED, ""),
    "x-queue-type": (ENFORCED, "classic, quorum and stream, each one Pulsar topic"),
    "x-max-age": (ENFORCED, "streams: older messages are no longer read"),
    "x-stream-max-segment-size-bytes": (ACCEPTED, "Pulsar has its own ledgers"),
    "x-initial-cluster-size": (ACCEPTED, "replication is Pulsar's"),
    "x-queue-master-locator": (ACCEPTED, "placement is Pulsar's"),
    "x-queue-leader-locator": (ACCEPTED, "placement is Pulsar's"),
    "x-quorum-initial-group-size": (ACCEPTED, "replication is Pulsar's"),
    "x-delivery-limit": (ENFORCED, "quorum queues; 20 when unset, as RabbitMQ 4"),
}


def _int(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if is_int(value) else f'"expected integer, got {type_name(value)}"'


def _non_negative(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _int(value, args)
    if error is None and value < 0:
        return f"{{value_negative,{value}}}"
    return error


def _expiry(value: int) -> str | None:
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_EXPIRY_MS:
        return f"{{value_too_large,{value}}}"
    return None


def _expires(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _int(value, args)
    if error is not None:
        return error
    return "{value_zero,0}" if value == 0 else _expiry(value)


def _message_ttl(value: Any, args: Mapping[str, Any]) -> str | None:
    return _int(value, args) or _expiry(value)


def _max_priority(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _non_negative(value, args)
    if error is None and value > MAX_PRIORITY:
        return f"{{max_value_exceeded,{value}}}"
    return error


def _positive(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _non_negative(value, args)
    return "{value_zero,0}" if error is None and value == 0 else error


def _bool(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if isinstance(value, bool) else f"{{unacceptable_type,{type_name(value)}}}"


def _string(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if is_string(value) else f"{{unacceptable_type,{type_name(value)}}}"


def _dlx_routing_key(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _string(value, args)
    if error is None and "x-dead-letter-exchange" not in args:
        return "routing_key_but_no_dlx_defined"
    return error


def _one_of(choices: tuple[str, ...], error: Callable[[str], str]) -> Check:
    def check(value: Any, args: Mapping[str, Any]) -> str | None:
        bad_type = _string(value, args)
        if bad_type is not None:
            return bad_type
        text = value if isinstance(value, str) else value.decode("utf-8", "replace")
        return None if text in choices else error(text)

    return check


def _queue_version(value: Any, args: Mapping[str, Any]) -> str | None:
    error = _non_negative(value, args)
    if error is None and value not in (1, 2):
        return f"\"unsupported queue version '{value}'\""
    return error


def _queue_type(value: Any, args: Mapping[str, Any]) -> str | None:
    bad_type = _string(value, args)
    if bad_type is not None:
        return bad_type
    text = value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None if text in QUEUE_TYPES else f"\"unsupported queue type '{text}'\""


def max_age_ms(value: Any) -> int | None:
    """x-max-age ("7D", "12h", "30m", "10s", "1Y", "2M") in ms; None when malformed."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not isinstance(text, str) or len(text) < 2 or not text[:-1].isdigit():
        return None
    unit = AGE_UNITS_MS.get(text[-1])
    return None if unit is None else int(text[:-1]) * unit


AGE_UNITS_MS = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1000,
}


def _max_age(value: Any, _args: Mapping[str, Any]) -> str | None:
    return None if max_age_ms(value) is not None else "invalid_max_age"


# RabbitMQ's declare_args(), in its order.
VALIDATORS: tuple[tuple[str, Check], ...] = (
    ("x-expires", _expires),
    ("x-message-ttl", _message_ttl),
    ("x-dead-letter-exchange", _string),
    ("x-dead-letter-routing-key", _dlx_routing_key),
    ("x-dead-letter-strategy", _one_of(DEAD_LETTER_STRATEGIES, lambda _: "invalid_dlx_strategy")),
    ("x-max-length", _non_negative),
    ("x-max-length-bytes", _non_negative),
    ("x-max-in-memory-length", _non_negative),
    ("x-max-in-memory-bytes", _non_negative),
    ("x-max-priority", _max_priority),
    ("x-overflow", _one_of(OVERFLOW_MODES, lambda _: "invalid_overflow")),
    ("x-queue-mode", _one_of(QUEUE_MODES, lambda m: f"\"unsupported queue mode '{m}'\"")),
    ("x-queue-version", _queue_version),
    ("x-single-active-consumer", _bool),
    ("x-queue-type", _queue_type),
    ("x-quorum-initial-group-size", _positive),
    ("x-queue-leader-locator", _one_of(LEADER_LOCATORS, lambda _: "invalid_queue_locator_arg")),
    ("x-max-age", _max_age),
    ("x-stream-max-segment-size-bytes", _non_negative),
    ("x-initial-cluster-size", _positive),
)


def queue_type(arguments: Mapping[str, Any]) -> str:
    """ "classic" unless x-queue-type says otherwise (validated before use)."""
    value = arguments.get("x-queue-type", "classic")
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")


def argument_errors(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(argument, RabbitMQ error term) pairs, in RabbitMQ's checking order.

    An empty list means the arguments are acceptable for a new queue. An
    entry whose term is empty names an argument the queue type does not take.
    """
    errors: list[tuple[str, str]] = []
    type_value = arguments.get("x-queue-type")
    if type_value is not None:
        error = _queue_type(type_value, arguments)
        if error is not None:
            return [("x-queue-type", error)]
    allowed = TYPE_ARGUMENTS[queue_type(arguments)]
    for name, check in VALIDATORS:
        if name in allowed and name in arguments:
            error = check(arguments[name], arguments)
            if error is not None:
                errors.append((name, error))
                return errors
    for name in arguments:
        if name in _ALL_TYPED_ARGUMENTS and name not in allowed:
            errors.append((name, ""))
            return errors
    return errors


def equivalence_errors(
    current: Mapping[str, Any], requested: Mapping[str, Any]
) -> list[tuple[str, str, str]]:
    """(argument, received, current) for arguments whose redeclare differs.

    Only the arguments of the queue's type are compared (RabbitMQ ignores the
    rest), and a missing x-queue-type equals "classic".
    """
    differences: list[tuple[str, str, str]] = []
    for name in TYPE_ARGUMENTS[queue_type(current)]:
        old, new = current.get(name), requested.get(name)
        if name == "x-queue-type" and old in (None, "classic") and new in (None, "classic"):
            continue
        if old is None and new is None:
            continue
        if old is None or new is None or not same_value(old, new):
            differences.append((name, describe(new), describe(old)))
    return differences
