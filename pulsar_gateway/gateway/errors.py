"""The one error that storage raises, whatever stands behind it.

Every port implementation (Pulsar, or the in-memory twins the unit tests use) raises
`StorageError` when the backend fails or cannot be reached, and each protocol handler turns
it into its own protocol's answer (Kafka: KAFKA_STORAGE_ERROR or REQUEST_TIMED_OUT; AMQP: a
channel or connection close). It lives in the core so that the backend seam at the bottom
and the ports above it share it without either importing the other.
"""


class StorageError(Exception):
    """Storage failed or is unreachable; the operation may be retried."""
