"""What every command shares: the `Command` base (its `TYPE` is both its BaseCommand type
and the field that carries it), `UnknownCommand`, and the enums commands use."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from pulsar_gateway.gateway.backend.wire.protobuf import ProtoMessage


class SubscriptionType(IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class InitialPosition(IntEnum):
    LATEST = 0
    EARLIEST = 1


class AckType(IntEnum):
    INDIVIDUAL = 0
    CUMULATIVE = 1


class LookupType(IntEnum):
    REDIRECT = 0
    CONNECT = 1
    FAILED = 2


class Command(ProtoMessage):
    """A command: `TYPE` is its BaseCommand type and field number."""

    __slots__ = ()
    TYPE: ClassVar[int] = 0


@dataclass(slots=True)
class UnknownCommand:
    """A command type this client does not know; skipped by the connection."""

    type: int
