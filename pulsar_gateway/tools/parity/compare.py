"""The comparison by content, as Spark DataFrame operations (nothing collected but
counts and a few example offsets per partition and kind). Only partitions whose two
logs the in-order walk (in_order.py) found different come here.

1. Every source record gets the target offset it should have: from the migration's
   translation runs, or, for a partition copied without one, by aligning the two logs'
   starts.
2. Records are matched by content (key, value, headers), the n-th copy of a content on
   one side with the n-th on the other, so a dropped or inserted record does not shift
   the rest out of step.
3. What is left on both sides is paired by expected position: a pair is a changed
   record (key, value or headers); a source record alone is missing; a target record
   alone is extra, or a duplicate when its content is also in the source.
4. Among matched records, per key, the target order must follow the source order; and
   timestamps must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

KINDS = (
    "missing",
    "extra",
    "duplicate",
    "key_mismatch",
    "value_mismatch",
    "header_mismatch",
    "order_break",
    "timestamp_drift",
)
EXAMPLES = 5
KEYS = ["topic", "partition"]


@dataclass
class PartitionReport:
    topic: str
    partition: int
    source_records: int = 0
    target_records: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    max_timestamp_drift_ms: int = 0
    examples: dict[str, list[tuple[int | None, int | None]]] = field(default_factory=dict)
    # "in order" (in_order.py found both logs identical) or "by content" (compared here)
    method: str = "by content"

    @property
    def ok(self) -> bool:
        return self.source_records == self.target_records and not any(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "ok": self.ok,
            "compared": self.method,
            "source_records": self.source_records,
            "target_records": self.target_records,
            **self.counts,
            "max_timestamp_drift_ms": self.max_timestamp_drift_ms,
            "examples": {
                kind: [{"source_offset": s, "target_offset": t} for s, t in pairs]
                for kind, pairs in self.examples.items()
            },
        }


def compare(
    spark: SparkSession,
    source: DataFrame,
    target: DataFrame,
    runs: list[tuple[str, int, int, int, int]],
    aligns: list[tuple[str, int, int, int]],
) -> list[PartitionReport]:
    """`runs`: (topic, partition, source start, target start, length) of migrated
    partitions; `aligns`: (topic, partition, source start, target start) of the others."""
    source = source.persist(StorageLevel.DISK_ONLY)
    target = target.persist(StorageLevel.DISK_ONLY)
    try:
        problems = _problems(spark, source, target, runs, aligns).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        reports = _reports(source, target, problems)
        problems.unpersist()
        return reports
    finally:
        source.unpersist()
        target.unpersist()


def _expected(
    spark: SparkSession,
    source: DataFrame,
    runs: list[tuple[str, int, int, int, int]],
    aligns: list[tuple[str, int, int, int]],
) -> DataFrame:
    run_frame = spark.createDataFrame(
        runs, "topic string, partition int, r_src long, r_tgt long, r_len long"
    )
    align_frame = spark.createDataFrame(
        aligns, "topic string, partition int, a_src long, a_tgt long"
    )
    s = source.alias("s")
    r = F.broadcast(run_frame).alias("r")
    in_run = (
        (F.col("s.topic") == F.col("r.topic"))
        & (F.col("s.partition") == F.col("r.partition"))
        & (F.col("s.offset") >= F.col("r.r_src"))
        & (F.col("s.offset") < F.col("r.r_src") + F.col("r.r_len"))
    )
    with_runs = s.join(r, in_run, "left").select(
        "s.*", (F.col("r.r_tgt") + F.col("s.offset") - F.col("r.r_src")).alias("by_run")
    )
    aligned = with_runs.join(F.broadcast(align_frame), KEYS, "left")
    return aligned.select(
        *[F.col(c) for c in source.columns],
        F.coalesce(F.col("by_run"), F.col("a_tgt") + F.col("offset") - F.col("a_src")).alias(
            "expected"
        ),
    )


def _problems(
    spark: SparkSession,
    source: DataFrame,
    target: DataFrame,
    runs: list[tuple[str, int, int, int, int]],
    aligns: list[tuple[str, int, int, int]],
) -> DataFrame:
    """One row per problem: topic, partition, kind, source offset, target offset, drift."""
    by_content = Window.partitionBy("topic", "partition", "content").orderBy("offset")
    s = _expected(spark, source, runs, aligns).withColumn("occ", F.row_number().over(by_content))
    t = target.withColumn("occ", F.row_number().over(by_content))
    s_cols = [F.col(c).alias(f"s_{c}") for c in s.columns if c not in ("topic", "partition")]
    t_cols = [F.col(c).alias(f"t_{c}") for c in t.columns if c not in ("topic", "partition")]
    sx = s.select("topic", "partition", *s_cols)
    tx = t.select("topic", "partition", *t_cols)
    joined = sx.join(
        tx,
        (sx.topic == tx.topic)
        & (sx.partition == tx.partition)
        & (sx.s_content == tx.t_content)
        & (sx.s_occ == tx.t_occ),
        "full_outer",
    ).select(
        F.coalesce(sx.topic, tx.topic).alias("topic"),
        F.coalesce(sx.partition, tx.partition).alias("partition"),
        *[c for c in sx.columns if c.startswith("s_")],
        *[c for c in tx.columns if c.startswith("t_")],
    )
    # read by every kind of problem below: computed once
    joined = joined.persist(StorageLevel.DISK_ONLY)

    matched = joined.where(F.col("s_offset").isNotNull() & F.col("t_offset").isNotNull())
    source_only = joined.where(F.col("t_offset").isNull()).select(
        "topic", "partition", *[c for c in joined.columns if c.startswith("s_")]
    )
    target_only = joined.where(F.col("s_offset").isNull()).select(
        "topic", "partition", *[c for c in joined.columns if c.startswith("t_")]
    )

    a, b = source_only.alias("a"), target_only.alias("b")
    paired = a.join(
        b,
        (F.col("a.topic") == F.col("b.topic"))
        & (F.col("a.partition") == F.col("b.partition"))
        & (F.col("a.s_expected") == F.col("b.t_offset")),
        "full_outer",
    ).select(
        F.coalesce(F.col("a.topic"), F.col("b.topic")).alias("topic"),
        F.coalesce(F.col("a.partition"), F.col("b.partition")).alias("partition"),
        "a.s_offset",
        "a.s_key_hash",
        "a.s_value_hash",
        "a.s_headers_hash",
        "b.t_offset",
        "b.t_key_hash",
        "b.t_value_hash",
        "b.t_headers_hash",
        "b.t_content",
    )
    both = F.col("s_offset").isNotNull() & F.col("t_offset").isNotNull()
    source_contents = source.select("topic", "partition", F.col("content").alias("t_content"))
    source_contents = source_contents.distinct().withColumn("known", F.lit(True))
    extras = paired.where(F.col("s_offset").isNull()).join(
        source_contents, ["topic", "partition", "t_content"], "left"
    )

    def rows(frame: DataFrame, kind: Any, drift: Any = None) -> DataFrame:
        return frame.select(
            "topic",
            "partition",
            (F.lit(kind) if isinstance(kind, str) else kind).alias("kind"),
            F.col("s_offset").alias("source_offset"),
            F.col("t_offset").alias("target_offset"),
            (F.lit(None).cast("long") if drift is None else drift).alias("drift"),
        )

    nulls_differ = ~F.col("s_key_hash").eqNullSafe(F.col("t_key_hash"))
    changed = paired.where(both)
    by_key = Window.partitionBy("topic", "partition", "s_key_hash").orderBy("t_offset")
    ordered = matched.where(F.col("s_key_hash").isNotNull()).withColumn(
        "before", F.lag("s_offset").over(by_key)
    )
    return (
        rows(paired.where(F.col("t_offset").isNull()), "missing")
        .unionByName(rows(extras, F.when(F.col("known"), "duplicate").otherwise("extra")))
        .unionByName(rows(changed.where(nulls_differ), "key_mismatch"))
        .unionByName(
            rows(changed.where(F.col("s_value_hash") != F.col("t_value_hash")), "value_mismatch")
        )
        .unionByName(
            rows(
                changed.where(F.col("s_headers_hash") != F.col("t_headers_hash")),
                "header_mismatch",
            )
        )
        .unionByName(rows(ordered.where(F.col("before") > F.col("s_offset")), "order_break"))
        .unionByName(
            rows(
                matched.where(F.col("s_ts") != F.col("t_ts")),
                "timestamp_drift",
                F.col("t_ts") - F.col("s_ts"),
            )
        )
    )


def _reports(source: DataFrame, target: DataFrame, problems: DataFrame) -> list[PartitionReport]:
    reports: dict[tuple[str, int], PartitionReport] = {}

    def report(topic: str, partition: int) -> PartitionReport:
        return reports.setdefault((topic, partition), PartitionReport(topic, partition))

    for row in source.groupBy(*KEYS).count().collect():
        report(row["topic"], row["partition"]).source_records = row["count"]
    for row in target.groupBy(*KEYS).count().collect():
        report(row["topic"], row["partition"]).target_records = row["count"]
    totals = problems.groupBy(*KEYS, "kind").agg(
        F.count(F.lit(1)).alias("n"), F.max(F.abs("drift")).alias("max_drift")
    )
    for row in totals.collect():
        item = report(row["topic"], row["partition"])
        item.counts[row["kind"]] = row["n"]
        if row["kind"] == "timestamp_drift":
            item.max_timestamp_drift_ms = int(row["max_drift"] or 0)
    first = Window.partitionBy(*KEYS, "kind").orderBy(F.coalesce("source_offset", "target_offset"))
    examples = problems.withColumn("rank", F.row_number().over(first)).where(
        F.col("rank") <= EXAMPLES
    )
    for row in examples.orderBy(*KEYS, "kind", "rank").collect():
        item = report(row["topic"], row["partition"])
        item.examples.setdefault(row["kind"], []).append(
            (row["source_offset"], row["target_offset"])
        )
    return sorted(reports.values(), key=lambda r: (r.topic, r.partition))
