"""Kafka codec hot paths on one core: protocol framing per call, RecordBatch records per second.

    python -m bench.codec_timings [--repeat 2000] [--records 20000] [--per-batch 500]

Protocol: the mean time of one call, over --repeat calls after a warm-up call, of the request
header parser and of Produce v9 / Fetch v12 encode and decode with a 1000 B records field.
RecordBatch: --records records with 100 B values, --per-batch to a batch, encoded and decoded
with every codec; the best of three rounds. No gateway, no broker: pure codec speed.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from pulsar_gateway.kafka_codec import compression
from pulsar_gateway.kafka_codec.protocol import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)
from pulsar_gateway.kafka_codec.record_batch import Record, decode_batches, encode_batch

console = Console()


def per_call_us(function: Callable[[], Any], repeat: int) -> float:
    function()
    start = time.perf_counter()
    for _ in range(repeat):
        function()
    return (time.perf_counter() - start) / repeat * 1e6


def protocol_timings(repeat: int) -> dict[str, float]:
    records = b"r" * 1000
    produce = {
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": records}]}],
    }
    frame = memoryview(encode_request(0, 9, 1, "bench", produce))[4:]
    body = frame[parse_request_header(frame).body_offset :]
    partition = {"partition_index": 0, "high_watermark": 10, "records": records}
    fetch = {"responses": [{"topic": "orders", "partitions": [partition]}]}
    fetch_frame = memoryview(encode_response(1, 12, 1, fetch))[4:]
    calls: dict[str, Callable[[], Any]] = {
        "parse_request_header": lambda: parse_request_header(frame),
        "decode Produce v9 request": lambda: decode_request(0, 9, body),
        "encode Produce v9 request": lambda: encode_request(0, 9, 1, "b", produce),
        "encode Fetch v12 response": lambda: encode_response(1, 12, 1, fetch),
        "decode Fetch v12 response": lambda: decode_response(1, 12, fetch_frame),
    }
    return {name: per_call_us(call, repeat) for name, call in calls.items()}


def record_batch_rates(n: int, per_batch: int) -> list[tuple[str, float, float, float]]:
    """(codec, encoded records/s, decoded records/s, bytes/record on the wire) per codec."""
    rng = random.Random(1)
    values = [bytes(rng.choice(b"abcdefghij ") for _ in range(100)) for _ in range(n)]
    batches = [
        [
            Record(j, 1_700_000_000_000 + i + j, b"key-%d" % ((i + j) % 1000), values[i + j], [])
            for j in range(min(per_batch, n - i))
        ]
        for i in range(0, n, per_batch)
    ]
    rows = []
    for codec, name in sorted(compression.CODEC_NAMES.items()):
        enc = dec = float("inf")
        size = 0
        for _ in range(3):
            started = time.perf_counter()
            out = bytearray()
            for i, batch in enumerate(batches):
                encode_batch(i * per_batch, batch, codec, out=out)
            enc = min(enc, time.perf_counter() - started)
            data = memoryview(bytes(out))
            size = len(data)
            started = time.perf_counter()
            got = decode_batches(data)
            dec = min(dec, time.perf_counter() - started)
            if sum(batch.record_count for batch in got) != n:
                raise SystemExit(f"{name}: decoded a different number of records than encoded")
        rows.append((name, n / enc, n / dec, size / n))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="calls per protocol timing")
    parser.add_argument("--records", type=int, default=20_000, help="records per RecordBatch run")
    parser.add_argument("--per-batch", type=int, default=500, help="records in one batch")
    args = parser.parse_args(argv)

    table = Table(title=f"Kafka protocol: mean of {args.repeat} calls")
    table.add_column("call")
    table.add_column("us/call", justify="right")
    for name, micros in protocol_timings(args.repeat).items():
        table.add_row(name, f"{micros:.1f}")
    console.print(table)

    table = Table(
        title=f"RecordBatch: {args.records:,} records, {args.per_batch} a batch, best of 3"
    )
    for column in ("codec", "encode rec/s", "decode rec/s", "B/record on wire"):
        table.add_column(column, justify="left" if column == "codec" else "right")
    for name, enc, dec, per_record in record_batch_rates(args.records, args.per_batch):
        table.add_row(name, f"{enc:,.0f}", f"{dec:,.0f}", f"{per_record:.0f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
