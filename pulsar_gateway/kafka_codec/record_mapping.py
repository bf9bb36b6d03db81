"""Kafka record <-> Pulsar message, as KoP maps them, losslessly both ways.

key <-> partition key (and ordering key); value <-> payload (null stays null);
headers <-> properties; timestamp <-> event time (publish time when absent).
Pulsar keys and properties are strings, Kafka's are bytes, so what a string
cannot hold goes into reserved `__kafka.*` properties:
- a key that is not UTF-8, or is empty: base64 in the partition key, `__kafka.key.b64`;
- headers with non-UTF-8 or null values, repeated names, or reserved names (`__kafka.`,
  and `__gw.`, the gateway's own stamps): all of them, in order, as JSON in
  `__kafka.headers`;
- plain headers stay plain properties, but Pulsar keeps properties sorted by name, so
  when the names were not in that order their order goes in `__kafka.header-order`.
Messages written by plain Pulsar producers have none of these and map naturally.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from pulsar_gateway.gateway.messages import OutMessage, StoredMessage

KEY_B64 = "__kafka.key.b64"
HEADERS = "__kafka.headers"
HEADER_ORDER = "__kafka.header-order"
CODEC = "__kafka.codec"  # the producer's codec of a `pulsar`-format record, when compressed
RESERVED = "__kafka."
# the gateway's own stamps on every message it writes (the resend filter's `__gw.seq`)
GATEWAY_RESERVED = "__gw."


_PREFIXES = (RESERVED, GATEWAY_RESERVED)


def _reserved(name: str) -> bool:
    return name.startswith(_PREFIXES)


Header = tuple[str, bytes | None]


def _plain_headers(headers: Sequence[Header]) -> dict[str, str] | None:
    """Headers as plain properties, or None when that would lose something."""
    props: dict[str, str] = {}
    for name, value in headers:
        if value is None or name in props or _reserved(name):
            return None
        try:
            name.encode("utf-8")  # surrogate-escaped names cannot be Pulsar properties
            props[name] = value.decode("utf-8")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return None
    return props


def to_message(
    key: bytes | None, value: bytes | None, timestamp: int, headers: Sequence[Header]
) -> OutMessage:
    properties: dict[str, str] | None = None
    if headers:
        properties = _plain_headers(headers)
        if properties is not None:
            names = [name for name, _ in headers]
            if names != sorted(names):
                properties[HEADER_ORDER] = json.dumps(names, separators=(",", ":"))
        else:
            encoded = [
                [name, None if data is None else base64.b64encode(data).decode()]
                for name, data in headers
            ]
            properties = {HEADERS: json.dumps(encoded, separators=(",", ":"))}
    pulsar_key: str | None = None
    if key is not None:
        try:
            pulsar_key = key.decode("utf-8") if key else None
        except UnicodeDecodeError:
            pulsar_key = None
        if pulsar_key is None:
            pulsar_key = base64.b64encode(key).decode()
            properties = dict(properties or {})
            properties[KEY_B64] = "1"
    return OutMessage(value, pulsar_key, properties, timestamp if timestamp > 0 else 0)


def key_of(message: StoredMessage) -> bytes | None:
    if message.properties.get(KEY_B64):
        return base64.b64decode(message.key)
    return message.key.encode("utf-8") if message.key else None


def headers_of(message: StoredMessage) -> list[Header]:
    props = message.properties
    if not props:
        return []
    encoded = props.get(HEADERS)
    if encoded is not None:
        return [
            (name, None if data is None else base64.b64decode(data))
            for name, data in json.loads(encoded)
        ]
    order = props.get(HEADER_ORDER)
    if order is not None:
        # the gateway lists only plain names here; a foreign writer's list could name one of
        # its own stamps, and those never reach a Kafka client
        return [
            (name, props[name].encode("utf-8"))
            for name in json.loads(order)
            if name in props and not _reserved(name)
        ]
    # the common case on the Fetch path: only the gateway's own stamps, no headers at all
    plain = [(name, value) for name, value in props.items() if not name.startswith(_PREFIXES)]
    if not plain:
        return []
    plain.sort()
    return [(name, value.encode("utf-8")) for name, value in plain]


def timestamp_of(message: StoredMessage) -> int:
    return message.event_time or message.publish_time
