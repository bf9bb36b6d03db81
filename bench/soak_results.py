"""From what the soak recorded to its verdict: the checks (each pass or FAIL with the numbers
behind it), the per-protocol summary, the stalls with the faults around them, and the
clients' errors and dropped connections.

The checks are the issue's: every acknowledged message exactly once and in order, RSS back
within 20% of its pre-soak level (that of the gateway after a warm-up round of the same
load: see bench/soak.py), nothing but the faulty connections dropped; and two
that follow from them: every consumer group got every acknowledged record, and nothing a
hostile client sent was stored in the soak's topics or queues.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.soak_common import ClientRecord, Fault, Timeline
from bench.soak_kafka import GroupLedger
from bench.soak_report import stall_histogram

RSS_TOLERANCE = 1.2
TOP_STALLS = 15


def _check(name: str, ok: bool, detail: str) -> dict[str, str]:
    return {"check": name, "result": "pass" if ok else "FAIL", "detail": detail}


def _faults_during(timeline: Timeline, start: float, end: float) -> tuple[str, float | None]:
    """The faults overlapping [start, end] (or else the last one before it), and how long
    after the last overlapping fault ended the gap ended."""
    overlapping = [
        f
        for f in timeline.faults
        if f.start <= end and (f.end if f.end is not None else end) >= start
    ]
    if overlapping:
        last_end = max(f.end if f.end is not None else end for f in overlapping)
        return "; ".join(f"{f.describe()}: {f.outcome}" for f in overlapping), end - last_end
    before = timeline.fault_before(start)
    if before is None:
        return "none before it", None
    return (
        f"none during it; last before: {before.describe()}, {start - before.start:.1f} s earlier",
        None,
    )


def stalls(records: list[ClientRecord], timeline: Timeline, until: float) -> dict[str, Any]:
    """Gaps between successive acknowledgements of each healthy producer: the longest per
    producer; gaps of 0.5 s or more grouped by the faults around them (one freeze stalls
    every producer at once), longest first; and a histogram of all gaps."""
    everything: list[float] = []
    overall: tuple[float, float, str] = (0.0, 0.0, "")
    candidates: list[tuple[float, float, str]] = []
    per_producer = []
    for record in records:
        times = sorted(record.ack_times)
        gaps = [(b - a, a) for a, b in zip(times, times[1:], strict=False)]
        if times and until - times[-1] > 1:
            gaps.append((until - times[-1], times[-1]))  # never acknowledged again
        everything.extend(g for g, _ in gaps)
        candidates.extend((g, a, record.name) for g, a in gaps if g >= 0.5)
        overall = max([overall, *((g, a, record.name) for g, a in gaps)])
        longest = max(gaps, default=(0.0, 0.0))
        per_producer.append(
            {
                "producer": record.name,
                "acknowledged": len(times),
                "longest gap (s)": f"{longest[0]:.2f}",
                "from (s)": f"{longest[1]:.1f}",
            }
        )
    causes: dict[str, dict[str, Any]] = {}
    for gap, start, name in sorted(candidates, reverse=True):
        around, resumed = _faults_during(timeline, start, start + gap)
        cause = causes.setdefault(
            around,
            {
                "longest gap (s)": f"{gap:.2f}",
                "from (s)": f"{start:.1f}",
                "producers stalled": set(),
                "resumed after fault end (s)": "" if resumed is None else f"{resumed:.1f}",
                "around it": around,
            },
        )
        cause["producers stalled"].add(name)
    top = []
    for cause in list(causes.values())[:TOP_STALLS]:
        names = sorted(cause["producers stalled"])
        cause["producers stalled"] = f"{len(names)}: {', '.join(names[:4])}" + (
            ", ..." if len(names) > 4 else ""
        )
        top.append(cause)
    return {
        "longest_s": overall[0],
        "longest_producer": overall[2],
        "longest_from_s": overall[1],
        "per_producer": per_producer,
        "top": top,
        "histogram": stall_histogram(everything),
    }


RATE_SERIES = ("kafka acknowledged", "amqp confirmed", "amqp consumed")
SLOW = 0.5  # a window under half its target rate is marked: a stall a total hides


def rate_windows(
    timeline: Timeline,
    start: float,
    end: float,
    targets: dict[str, float],
    amqp_loop_lag_ms: dict[int, float],
) -> list[dict[str, Any]]:
    """Messages a second per window of the load (a minute, or a tenth of a shorter run)
    for each series, against the rate the load generators aim at, with the faults that
    began in the window: a stall of one protocol shows as a window far under its target
    even when the run's total looks plausible. Beside it, the worst lag of the AMQP
    clients' own event loop: a slow window with a large lag is the load generator starved
    of CPU, not the gateway."""
    window = max(10.0, min(60.0, (end - start) / 10))
    rows = []
    left = start
    while left < end - 1:
        right = min(end, left + window)
        seconds = range(int(left), int(right))
        row: dict[str, Any] = {"from (s)": f"{left:.0f}", "to (s)": f"{right:.0f}"}
        slow = []
        for name in RATE_SERIES:
            counts = timeline.series.get(name, Counter())
            rate = sum(counts.get(t, 0) for t in seconds) / max(1, len(seconds))
            target = targets.get(name)
            share = f" ({rate / target:.0%})" if target else ""
            row[f"{name} /s"] = f"{rate:,.0f}{share}"
            if target and rate < target * SLOW:
                slow.append(name)
        lag = max((amqp_loop_lag_ms.get(t, 0.0) for t in seconds), default=0.0)
        row["AMQP client loop lag, max (ms)"] = f"{lag:,.0f}"
        kinds = Counter(f.kind for f in timeline.faults if left <= f.start < right)
        row["faults begun"] = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        row["under half the target"] = ", ".join(slow)
        rows.append(row)
        left = right
    return rows


def clients_table(records: list[ClientRecord]) -> list[dict[str, Any]]:
    rows = []
    for record in records:
        first_drop = f"{record.drops[0][0]:.1f} s: {record.drops[0][1]}" if record.drops else ""
        first_error = f"{record.errors[0][0]:.1f} s: {record.errors[0][1]}" if record.errors else ""
        kinds = Counter(text.split(":")[0] for _, text in record.errors)
        rows.append(
            {
                "client": record.name,
                "protocol": record.protocol,
                "role": record.role,
                "healthy": "yes" if record.healthy else "victim",
                "produced": record.produced,
                "acks": len(record.ack_times),
                "errors": len(record.errors),
                "error kinds": ", ".join(f"{k} x{n}" for k, n in kinds.most_common(4)),
                "drops": len(record.drops),
                "first drop": first_drop[:300],
                "first error": first_error[:300],
            }
        )
    return rows


def groups_table(groups: list[GroupLedger], acked: set[tuple[str, str, int]]) -> list[dict]:
    return [
        {
            "group": g.group,
            "acknowledged records": len(acked),
            "received": sum(g.seen.values()),
            "missing": g.missing(acked),
            "received twice or more": sum(1 for n in g.seen.values() if n > 1),
            "commits": g.commits,
            "commit errors": len(g.commit_errors),
            "rebalances": len(g.rebalances),
            "foreign": g.foreign,
        }
        for g in groups
    ]


def summary(kafka: dict[str, Any], amqp: dict[str, Any], produced: int) -> list[dict]:
    k, a = kafka["totals"], amqp["totals"]
    return [
        {
            "protocol": "Kafka",
            "produced": produced,
            "acknowledged": k.get("acknowledged", 0),
            "verified": k.get("verified", 0),
            "lost": k.get("lost", 0),
            "duplicated": k.get("duplicated", 0),
            "reordered": k.get("reordered", 0),
            "misplaced": k.get("misplaced", 0),
            "failed / nacked": k.get("failed", 0),
            "ghosts": k.get("ghosts", 0),
        },
        {
            "protocol": "AMQP",
            "produced": a.get("published", 0),
            "acknowledged": a.get("confirmed", 0),
            "verified": a.get("verified", 0),
            "lost": a.get("lost", 0),
            "duplicated": a.get("duplicated", 0),
            "reordered": a.get("reordered", 0),
            "misplaced": "",
            "failed / nacked": a.get("nacked", 0) + a.get("in doubt", 0),
            "ghosts": a.get("ghosts", 0),
        },
    ]


def checks(
    kafka: dict[str, Any],
    amqp: dict[str, Any],
    groups: list[dict[str, Any]],
    rss: dict[str, float],
    records: list[ClientRecord],
    drain_problems: dict[str, str],
    gateway_exit: int | None,
) -> list[dict[str, str]]:
    k, a = kafka["totals"], amqp["totals"]
    bad_k = {n: k.get(n, 0) for n in ("lost", "duplicated", "reordered", "misplaced") if k.get(n)}
    bad_a = {n: a.get(n, 0) for n in ("lost", "duplicated", "reordered") if a.get(n)}
    missing = {g["group"]: g["missing"] for g in groups if g["missing"]}
    healthy = [r for r in records if r.healthy]
    dropped = {r.name: len(r.drops) for r in healthy if r.drops}
    foreign = kafka["foreign_count"] + a.get("unknown", 0)
    return [
        _check(
            "gateway ran throughout",
            gateway_exit is None,
            "alive at the end" if gateway_exit is None else f"exited with {gateway_exit}",
        ),
        _check(
            "Kafka: every acknowledged record exactly once, in order per key, at its offset",
            not bad_k and not kafka["problems"],
            f"{k.get('verified', 0):,} of {k.get('acknowledged', 0):,} verified"
            + (f"; {bad_k}" if bad_k else "")
            + (f"; {'; '.join(kafka['problems'][:3])}" if kafka["problems"] else ""),
        ),
        _check(
            "AMQP: every confirmed message exactly once, in order per queue",
            not bad_a and not drain_problems,
            f"{a.get('verified', 0):,} of {a.get('confirmed', 0):,} verified"
            + (f"; {bad_a}" if bad_a else "")
            + (f"; drain: {drain_problems}" if drain_problems else ""),
        ),
        _check(
            "Kafka consumer groups: each received every acknowledged record",
            not missing,
            "none missing" if not missing else f"missing per group: {missing}",
        ),
        _check(
            "nothing hostile stored",
            foreign == 0,
            f"{kafka['foreign_count']} foreign records in the soak's partitions, "
            f"{a.get('unknown', 0)} unknown messages in its queues",
        ),
        _check(
            f"gateway RSS back within {RSS_TOLERANCE - 1:.0%} of its level after the warm-up",
            rss["after_mib"] <= rss["limit_mib"],
            f"cold {rss.get('cold_mib', 0):.0f} MiB, after the warm-up "
            f"{rss['before_mib']:.0f} MiB, peak {rss['peak_mib']:.0f} MiB, after "
            f"{rss['after_mib']:.0f} MiB (limit {rss['limit_mib']:.0f}), "
            f"settle waited {rss['settle_s']:.0f} s",
        ),
        _check(
            "no healthy client lost a connection",
            not dropped,
            f"{len(healthy)} healthy clients; "
            + ("none dropped" if not dropped else f"drops: {dropped}"),
        ),
    ]


def faults_json(faults: list[Fault]) -> list[dict[str, Any]]:
    return [
        {
            "number": f.number,
            "kind": f.kind,
            "start": round(f.start, 2),
            "end": None if f.end is None else round(f.end, 2),
            "detail": f.detail,
            "outcome": f.outcome,
            "describe": f.describe(),
        }
        for f in faults
    ]


def series_json(timeline: Timeline, end: float) -> dict[str, list[list[float]]]:
    seconds = range(int(end) + 1)
    return {
        name: [[t, counts.get(t, 0)] for t in seconds]
        for name, counts in sorted(timeline.series.items())
    }
