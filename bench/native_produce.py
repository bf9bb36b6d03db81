"""Kafka `pulsar`-format produce with `pulsar.client = pulsar-client` and `= native`, each
beside pulsar-client writing straight to the same broker in the same run (the bare batched
producer of `kafka_throughput.pulsar_direct`), with ratios: the smallest comparison behind
docs/pulsar-protocol.md, "On the data path".

For each setting: one gateway, a `--partitions` topic, `--records` records of `--size`
bytes produced with confluent-kafka (acks=all; after `--warm` records unmeasured, so
that the partitions' start is not in the numbers), fetched from the tail, then fetched again
after a gateway restart (from storage); the server CPU (gateway + broker, and the gateway
alone) per record; then pulsar-client direct on that gateway's broker. `--profile` records
py-spy under each gateway's produce and prints the functions that hold the most samples
(self and inclusive), with collapsed stacks and a flame graph beside `--out`.

    python -m bench.native_produce [--records 100000] [--size 100] [--headers] [--profile]
                                   [--flame-graphs]

`--flame-graphs` writes a py-spy SVG of each gateway's produce (`{out}-{setting}.svg`), and
the results name them with the committed "before" capture (`BEFORE`: the native produce
path before it was built in one pass), so `make bench`'s report shows the produce path's
flame graphs before and after side by side (`sections`).
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.flame import Flame, flame_graph
from bench.kafka_throughput import (
    create_topic,
    faulted,
    kafka_consume,
    kafka_produce,
    measured,
    pulsar_direct,
)
from harness.gateway_process import GatewayProcess
from pulsar_gateway.tools.html_report import esc, table

CHOICES = ("pulsar-client", "native")
# The native produce path's flame graph before its one-pass build (this bench with
# --flame-graphs at commit 6ff0e35, 100k records, load average 1.9): what `sections` shows
# as "before" beside this run's.
BEFORE = Path(__file__).resolve().parent / "flames" / "native-produce-before-6ff0e35.svg"
# the numbers `sections` shows, a column each
SHOWN = (
    "produce_rps",
    "direct_produce_rps",
    "produce_vs_direct",
    "gateway_cpu_us_per_record",
    "broker_cpu_us_per_record",
    "cold_fetch_vs_direct",
)
BEFORE_NOTE = (
    "native setting at commit 6ff0e35, before the one-pass build: 12.2 us of gateway CPU a "
    "record, 0.67x of pulsar-client direct (py-spy attached)"
)


@contextlib.contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy collapsed stacks of `pid` while the block runs (`out` None: not profiled)."""
    spy = Path(sys.executable).parent / "py-spy"
    spy_path = str(spy) if spy.exists() else shutil.which("py-spy")
    if out is None or spy_path is None:
        yield
        return
    process = subprocess.Popen(
        [spy_path, "record", "--pid", str(pid), "--format", "raw", "--output", str(out)]
        + ["--rate", "200", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)


def summarise(collapsed: Path, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """The functions with the most samples: as the running frame (self) and anywhere on
    the stack (inclusive), as shares of all samples."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame.split(" (")[0] for frame in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    if not total:
        return {"self": [], "inclusive": []}
    return {
        "self": [(name, count / total) for name, count in own.most_common(top)],
        "inclusive": [(name, count / total) for name, count in anywhere.most_common(top * 2)],
    }


def run_one(choice: str, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    n, size, parts = args.records, args.size, args.partitions
    gateway = GatewayProcess(scratch / choice, extra=["--pulsar-client", choice]).start()
    result: dict[str, Any] = {}
    try:
        time.sleep(1)
        assert gateway.process is not None
        gw_pid = gateway.process.pid
        servers = [gw_pid, gateway.broker_pid()]
        create_topic(gateway.bootstrap, parts)
        if args.warm:  # the partitions opened (producers, readers) before the measuring
            kafka_produce(gateway.bootstrap, "bench", args.warm, size)
        cpu: dict[str, float] = {}
        alone: dict[str, float] = {}
        faults: dict[str, float] = {}
        collapsed = args.out.with_name(f"{args.out.name}-{choice}.txt") if args.profile else None
        svg = args.out.with_name(f"{args.out.name}-{choice}.svg") if args.flame_graphs else None
        flaming = flame_graph(gw_pid, svg) if svg else contextlib.nullcontext(Flame())
        with (
            profiled(gw_pid, collapsed),
            flaming as flame,
            measured(servers, cpu, "produce"),
            measured([gw_pid], alone, "produce"),
            measured([gateway.broker_pid()], alone, "broker"),
            faulted([gw_pid], faults, "produce"),
        ):
            produce = kafka_produce(gateway.bootstrap, "bench", n, size, headers=args.headers)
        with (
            measured(servers, cpu, "fetch"),
            measured([gw_pid], alone, "fetch"),
            faulted([gw_pid], faults, "fetch"),
        ):
            tail = kafka_consume(gateway.bootstrap, "bench", parts, n + args.warm)
        result = {
            "produce_rps": n / produce,
            "tail_fetch_rps": (n + args.warm) / tail,
            "server_cpu_us_per_record": cpu["produce"] * 1e6 / n,
            "gateway_cpu_us_per_record": alone["produce"] * 1e6 / n,
            "broker_cpu_us_per_record": alone["broker"] * 1e6 / n,
            "gateway_minor_faults_per_record": faults["produce"] / n,
            "tail_fetch_gateway_cpu_us_per_record": alone["fetch"] * 1e6 / (n + args.warm),
            "tail_fetch_gateway_minor_faults_per_record": faults["fetch"] / (n + args.warm),
        }
        if collapsed is not None and collapsed.exists():
            result["profile"] = summarise(collapsed)
        if flame.path is not None:
            result["flame_graph"] = str(flame.path)
        elif flame.error is not None:
            result["flame_graph_error"] = flame.error
        gateway.stop()
        gateway.start()
        cold = kafka_consume(gateway.bootstrap, "bench", parts, n + args.warm)
        result["cold_fetch_rps"] = (n + args.warm) / cold
        direct_p, direct_c = pulsar_direct(f"pulsar://127.0.0.1:{gateway.broker_port}", n, size)
        result["direct_produce_rps"] = n / direct_p
        result["direct_read_rps"] = n / direct_c
        result["produce_vs_direct"] = result["produce_rps"] / result["direct_produce_rps"]
        result["cold_fetch_vs_direct"] = result["cold_fetch_rps"] / result["direct_read_rps"]
    finally:
        gateway.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--warm",
        type=int,
        default=0,
        help="records produced first, unmeasured (the partitions' start not in the numbers)",
    )
    parser.add_argument(
        "--headers", action="store_true", help="two headers a record (kafka_throughput.HEADERS)"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy under each produce")
    parser.add_argument(
        "--flame-graphs", action="store_true", help="a py-spy SVG of each gateway's produce"
    )
    parser.add_argument("--out", type=Path, default=Path("reports/native-produce"))
    parser.add_argument("--only", choices=CHOICES, help="one setting only")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "records": args.records,
        "warm": args.warm,
        "size": args.size,
        "partitions": args.partitions,
        "headers": args.headers,
    }
    with tempfile.TemporaryDirectory() as scratch:
        for choice in [args.only] if args.only else CHOICES:
            results[choice] = run_one(choice, args, Path(scratch))
    results["ratios"] = {
        f"produce ({choice} setting) vs pulsar-client direct": results[choice]["produce_vs_direct"]
        for choice in CHOICES
        if choice in results
    }
    if args.flame_graphs and BEFORE.exists():
        results["before"] = {"flame_graph": str(BEFORE), "note": BEFORE_NOTE}
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    for choice in CHOICES:
        numbers = results.get(choice)
        if not numbers:
            continue
        print_numbers(f"{choice}:", numbers, 28)


def print_numbers(title: str, numbers: dict[str, Any], width: int) -> None:
    """One setting's numbers a line each, its profile (if any) as shares of samples."""
    print(f"\n{title}")
    for name, value in numbers.items():
        if name == "profile":
            for kind, rows in value.items():
                print(f"  profile, {kind}:")
                for function, share in rows:
                    print(f"    {share:6.1%}  {function}")
        elif isinstance(value, str):
            print(f"  {name:{width}} {value}")
        else:
            print(f"  {name:{width}} {value:12,.2f}")


def sections(results: dict[str, Any]) -> list[str]:
    """The part's HTML in `make bench`'s report: each setting's numbers beside pulsar-client
    direct's (same run), then the produce path's flame graphs, before and after."""
    rows = []
    for choice in CHOICES:
        numbers = results.get(choice) or {}
        if numbers:
            row: dict[str, Any] = {"setting": choice}
            row.update({k: round(numbers[k], 2) for k in SHOWN if k in numbers})
            rows.append(row)
    out = [
        f"<p>{results.get('records', 0):,} records of {results.get('size', 0)} B"
        f"{', two headers each' if results.get('headers') else ''}, "
        f"{results.get('partitions', 0)} partitions, confluent-kafka acks=all, measured after "
        f"{results.get('warm', 0):,} records produced to open the partitions; per setting a "
        "gateway of its own, then pulsar-client's bare batched producer and reader straight "
        "to that gateway's broker (the peer, same run).</p>",
        table(rows),
    ]
    graphs = [
        ("before: " + str((results.get("before") or {}).get("note", "")), results.get("before")),
        ("after: native setting, this run", results.get("native")),
        ("pulsar-client setting, this run", results.get("pulsar-client")),
    ]
    shown = []
    for title, numbers in graphs:
        path = Path((numbers or {}).get("flame_graph") or "")
        if not path.is_file():
            continue
        data = base64.b64encode(path.read_bytes()).decode()
        shown.append(
            f'<h4>{esc(title)}</h4><img style="width:100%" alt="flame graph, {esc(title)}" '
            f'src="data:image/svg+xml;base64,{data}"/>'
        )
    if shown:
        out.append("<h3>The gateway's produce path (py-spy), before and after</h3>")
        out += shown
    return out


if __name__ == "__main__":
    main()
