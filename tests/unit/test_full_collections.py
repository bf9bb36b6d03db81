"""`pulsar-gateway run` makes full garbage-collection passes rarer (gateway/full_collections.py):
a full pass holds the GIL, so the event loop, in one piece, and the half million dicts and
lists of two 49,999-topic ListOffsets started 6-8 of them, of 130-300 ms each."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from pulsar_gateway.gateway.full_collections import THRESHOLDS, collect_fully_less_often
from pulsar_gateway.handlers.kafka import requests
from pulsar_gateway.kafka_codec import protocol

TOPICS = 20_000  # two requests: 3 full passes with the default thresholds, none after


@pytest.fixture
def full_passes() -> Iterator[list[int]]:
    """Counts the full passes the garbage collector starts; restores its thresholds."""
    thresholds = gc.get_threshold()
    passes: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            passes.append(1)

    gc.collect()  # what the test process held before is not counted as new
    gc.callbacks.append(seen)
    try:
        yield passes
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)


def _two_big_list_offsets() -> list[bytes]:
    """Decode two ListOffsets of TOPICS topics, build their answers, encode them."""
    partition = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
    topics = [{"name": f"t{i}", "partitions": [partition]} for i in range(TOPICS)]
    body = {"replica_id": -1, "isolation_level": 0, "topics": topics}
    frame = memoryview(protocol.encode_request(2, 7, 1, "big", body))[4:]
    del topics, body
    decoded = []
    for _ in range(2):
        decoded.append(requests.decode(protocol.parse_request_header(frame), frame, 100_000))
    answers = []
    for request in decoded:
        assert request.body is not None
        answer = [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 3,
                        "old_style_offsets": [],
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": 0,
                    }
                ],
            }
            for topic in request.body["topics"]
        ]
        answers.append({"throttle_time_ms": 0, "topics": answer})
    return [protocol.encode_response(2, 7, 1, answer) for answer in answers]


def test_two_big_requests_start_no_full_pass(full_passes: list[int]) -> None:
    collect_fully_less_often()
    assert gc.get_threshold() == THRESHOLDS
    _two_big_list_offsets()
    assert full_passes == []


def test_the_default_thresholds_start_full_passes(full_passes: list[int]) -> None:
    """The measurement above means something: the interpreter's defaults do start them."""
    gc.set_threshold(700, 10, 10)
    _two_big_list_offsets()
    assert len(full_passes) >= 2
