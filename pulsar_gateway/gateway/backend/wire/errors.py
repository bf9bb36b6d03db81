"""The one error vocabulary of the wire client (docs/pulsar-protocol.md).

Everything the client raises derives from `PulsarError`, so the backend above it can turn
any failure into the ports' `StorageError` with one `except`. Decoding problems are
`DecodeError` (a subclass of ValueError too): the codec never lets anything else escape on
hostile bytes.
"""

from __future__ import annotations


class PulsarError(Exception):
    """Any failure of the wire client."""


class DecodeError(PulsarError, ValueError):
    """Bytes that are not a valid Pulsar frame, command or message metadata."""


class FrameTooLarge(DecodeError):
    """A frame announced a size over the connection's limit."""


class ChecksumMismatch(DecodeError):
    """A payload frame whose crc32c does not match its metadata and payload."""


class ConnectionClosed(PulsarError):
    """The connection ended (lost, closed by us, or refused by the broker) before an answer."""


class OperationTimeout(PulsarError):
    """The broker did not answer within the operation timeout."""


class ServerError(PulsarError):
    """The broker answered with an error (CommandError, a failed lookup, SEND_ERROR...).

    `code` is the number of Pulsar's ServerError enum, `name` its name when known.
    """

    def __init__(self, code: int, message: str, command: str = "") -> None:
        self.code = code
        self.name = SERVER_ERRORS.get(code, f"error {code}")
        self.message = message
        self.command = command
        where = f"{command}: " if command else ""
        super().__init__(f"{where}{self.name}: {message}")

    @property
    def retriable(self) -> bool:
        """Whether trying again later (after a new lookup) may succeed."""
        return self.code in RETRIABLE


class TopicLookupError(PulsarError):
    """A topic lookup that did not end at a broker (too many redirects, a bad URL)."""


class ProducerClosed(PulsarError):
    """The producer was closed (or fenced) before the send completed."""


class ConsumerClosed(PulsarError):
    """The consumer was closed while the caller waited."""


# Pulsar's ServerError enum (PulsarApi.proto), for messages and the retry decision.
SERVER_ERRORS = {
    0: "UnknownError",
    1: "MetadataError",
    2: "PersistenceError",
    3: "AuthenticationError",
    4: "AuthorizationError",
    5: "ConsumerBusy",
    6: "ServiceNotReady",
    7: "ProducerBlockedQuotaExceededError",
    8: "ProducerBlockedQuotaExceededException",
    9: "ChecksumError",
    10: "UnsupportedVersionError",
    11: "TopicNotFound",
    12: "SubscriptionNotFound",
    13: "ConsumerNotFound",
    14: "TooManyRequests",
    15: "TopicTerminatedError",
    16: "ProducerBusy",
    17: "InvalidTopicName",
    18: "IncompatibleSchema",
    19: "ConsumerAssignError",
    20: "TransactionCoordinatorNotFound",
    21: "InvalidTxnStatus",
    22: "NotAllowedError",
    23: "TransactionConflict",
    24: "TransactionNotFound",
    25: "ProducerFenced",
}
# Errors after which a reconnect (with a fresh lookup) is worth trying.
RETRIABLE = frozenset({0, 1, 2, 5, 6, 13, 14, 16})
