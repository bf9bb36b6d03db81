"""Kafka's error codes as the gateway numbers them, held against an independent client's
table (kafka-python's), so that a typo in a number cannot reach the wire."""

from __future__ import annotations

import inspect

import kafka.errors

from pulsar_gateway.kafka_codec.errors import ErrorCode


def test_every_code_has_kafkas_number() -> None:
    theirs = {
        cls.errno
        for cls in vars(kafka.errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, kafka.errors.BrokerResponseError)
        and isinstance(cls.errno, int)
    }
    ours = {code.value for code in ErrorCode}
    assert ours == theirs
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == kafka.errors.NotLeaderForPartitionError.errno
    assert ErrorCode.KAFKA_STORAGE_ERROR == kafka.errors.KafkaStorageError.errno
