"""DescribeConfigs, and the topic configs the gateway knows, checks and acts on.

`TOPIC_CONFIGS` is Kafka's own list of topic configs (Kafka 3.9's `LogConfig`) plus the
gateway's `pulsar.entry.format`: CreateTopics accepts exactly these names, checks each value
as a Kafka broker does (same types, ranges and messages) and refuses anything else with
INVALID_CONFIG. Most are accepted and shown but change nothing, because Pulsar does the
storing (segments, retention, replication); the ones with a `honoured` note are acted on.
docs/kafka-configs.md is the table of them all, with Kafka's default and the gateway's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pulsar_gateway.gateway.config import KafkaSection
from pulsar_gateway.handlers.kafka.apis.broker_configs import (
    CONFIG_TYPES,
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    broker_entries,
)
from pulsar_gateway.handlers.kafka.apis.group_configs import GROUP, describe_group
from pulsar_gateway.handlers.kafka.authorization import cluster_allowed, topic_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import TopicRecord
from pulsar_gateway.kafka_codec.entry_format import ENTRY_FORMATS, FORMAT_CONFIG
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.rights import DESCRIBE_CONFIGS

TOPIC = 2
BROKER = 4
LONG_MAX = (1 << 63) - 1
_INT_MAX = (1 << 31) - 1
_BOUNDS = {"LONG": (-(1 << 63), LONG_MAX), "INT": (-(1 << 31), _INT_MAX)}
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Java's Long.parseLong takes (no "1_000")

MAX_MESSAGE_BYTES = "max.message.bytes"
CLEANUP_POLICY = "cleanup.policy"
COMPRESSION_TYPE = "compression.type"
TIMESTAMP_TYPE = "message.timestamp.type"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_DIFFERENCE = "message.timestamp.difference.max.ms"
TIMESTAMP_BEFORE = "message.timestamp.before.max.ms"
TIMESTAMP_AFTER = "message.timestamp.after.max.ms"


@dataclass(frozen=True)
class TopicConfig:
    """One topic config as Kafka defines it: its type, default and valid values."""

    name: str
    kind: str  # Kafka's ConfigDef type: LONG, INT, DOUBLE, BOOLEAN, STRING or LIST
    kafka_default: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    honoured: str = ""  # what the gateway does with it; empty: accepted and shown only

    def problem(self, value: str) -> str | None:
        """Why `value` is not valid (Kafka's wording), or None."""
        value = value.strip()
        if self.kind in _BOUNDS or self.kind == "DOUBLE":
            try:
                if self.kind == "DOUBLE":
                    number: float = float(value)
                elif _INTEGER.fullmatch(value):
                    number = int(value)
                else:
                    raise ValueError(value)
            except ValueError:
                return f"Not a number of type {self.kind}"
            low, high = _BOUNDS.get(self.kind, (None, None))
            if low is not None and high is not None and not low <= number <= high:
                return f"Not a number of type {self.kind}"
            if self.low is not None and number < self.low:
                return f"Value must be at least {_show(self.low)}"
            if self.high is not None and number > self.high:
                return f"Value must be no more than {_show(self.high)}"
        elif self.kind == "BOOLEAN":
            if value.lower() not in ("true", "false"):
                return "Expected value to be either true or false"
        elif self.choices:
            items = [item.strip() for item in value.split(",")] if self.kind == "LIST" else [value]
            if any(item not in self.choices for item in items):
                return "String must be one of: " + ", ".join(self.choices)
        return None


def _show(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


_LONG_MAX = str(LONG_MAX)
TOPIC_CONFIGS: dict[str, TopicConfig] = {
    config.name: config
    for config in (
        TopicConfig(
            CLEANUP_POLICY,
            "LIST",
            "delete",
            choices=("compact", "delete"),
            honoured="compact: every record needs a key (INVALID_RECORD); nothing is compacted",
        ),
        TopicConfig("compression.gzip.level", "INT", "-1", -1, 9),
        TopicConfig("compression.lz4.level", "INT", "9", 1, 17),
        TopicConfig(
            "compression.type",
            "STRING",
            "producer",
            choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        TopicConfig("compression.zstd.level", "INT", "3", -131072, 22),
        TopicConfig("delete.retention.ms", "LONG", "86400000", 0),
        TopicConfig("file.delete.delay.ms", "LONG", "60000", 0),
        TopicConfig("flush.messages", "LONG", _LONG_MAX, 1),
        TopicConfig("flush.ms", "LONG", _LONG_MAX, 0),
        TopicConfig("follower.replication.throttled.replicas", "LIST", ""),
        TopicConfig("index.interval.bytes", "INT", "4096", 0),
        TopicConfig("leader.replication.throttled.replicas", "LIST", ""),
        TopicConfig("local.retention.bytes", "LONG", "-2", -2),
        TopicConfig("local.retention.ms", "LONG", "-2", -2),
        TopicConfig("max.compaction.lag.ms", "LONG", _LONG_MAX, 1),
        TopicConfig(
            MAX_MESSAGE_BYTES,
            "INT",
            "1048588",
            0,
            honoured="a larger produced batch is refused with MESSAGE_TOO_LARGE",
        ),
        TopicConfig("message.downconversion.enable", "BOOLEAN", "true"),
        TopicConfig("message.format.version", "STRING", "3.0-IV1"),
        TopicConfig(
            TIMESTAMP_AFTER,
            "LONG",
            _LONG_MAX,
            0,
            honoured="a record stamped further ahead fails with INVALID_TIMESTAMP",
        ),
        TopicConfig(
            TIMESTAMP_BEFORE,
            "LONG",
            _LONG_MAX,
            0,
            honoured="a record stamped further back fails with INVALID_TIMESTAMP",
        ),
        TopicConfig(
            TIMESTAMP_DIFFERENCE,
            "LONG",
            _LONG_MAX,
            0,
            honoured="stands in for before/after.max.ms left at their default",
        ),
        TopicConfig(
            TIMESTAMP_TYPE,
            "STRING",
            "CreateTime",
            choices=("CreateTime", LOG_APPEND_TIME),
            honoured="LogAppendTime: records are stamped with the append time",
        ),
        TopicConfig("min.cleanable.dirty.ratio", "DOUBLE", "0.5", 0, 1),
        TopicConfig("min.compaction.lag.ms", "LONG", "0", 0),
        TopicConfig("min.insync.replicas", "INT", "1", 1),
        TopicConfig("preallocate", "BOOLEAN", "false"),
        TopicConfig("remote.storage.enable", "BOOLEAN", "false"),
        TopicConfig("retention.bytes", "LONG", "-1"),
        TopicConfig("retention.ms", "LONG", "604800000", -1),
        TopicConfig("segment.bytes", "INT", "1073741824", 14),
        TopicConfig("segment.index.bytes", "INT", "10485760", 4),
        TopicConfig("segment.jitter.ms", "LONG", "0", 0),
        TopicConfig("segment.ms", "LONG", "604800000", 1),
        TopicConfig("unclean.leader.election.enable", "BOOLEAN", "false"),
        TopicConfig(
            FORMAT_CONFIG,
            "STRING",
            "",
            choices=tuple(ENTRY_FORMATS),
            honoured="how records are stored (docs/pulsar-mapping.md, 'Entry formats')",
        ),
    )
}
# Where the gateway's value differs from Kafka's default because Pulsar does the work:
# nothing is deleted by age (Pulsar's namespace retention decides).
_GATEWAY_DEFAULTS = {"retention.ms": "-1"}


def validate_configs(configs: dict[str, str | None]) -> str | None:
    """The first problem with a CreateTopics config set, worded as Kafka words it."""
    nulls = [key for key, value in configs.items() if value is None]
    if nulls:
        return "Null value not supported for topic configs: " + ",".join(nulls)
    for key, value in configs.items():
        config = TOPIC_CONFIGS.get(key)
        if config is None:
            return f"Unknown topic config name: {key}"
        assert value is not None
        problem = config.problem(value)
        if problem:
            return f"Invalid value {value} for configuration {key}: {problem}"
    return None


def topic_defaults(settings: KafkaSection) -> dict[str, str]:
    """Every topic config's value for a topic that sets none: Kafka's default, else the
    gateway's own (its settings for the message size and entry format)."""
    values = {name: config.kafka_default for name, config in TOPIC_CONFIGS.items()}
    values.update(_GATEWAY_DEFAULTS)
    values[MAX_MESSAGE_BYTES] = str(settings.message_max_bytes)
    values[FORMAT_CONFIG] = settings.entry_format
    return values


def topic_configs(record: TopicRecord, settings: KafkaSection) -> dict[str, str]:
    """The defaults, then what the topic set."""
    merged = topic_defaults(settings)
    merged.update(record.configs)
    return merged


@dataclass(frozen=True, slots=True)
class ProduceRules:
    """What a topic's configs ask of every batch produced to it. The default (nothing set)
    checks only the batch size, so the produce path looks at no record it need not."""

    max_message_bytes: int
    log_append_time: bool = False
    keys_required: bool = False
    before_ms: int | None = None  # None: no limit
    after_ms: int | None = None

    @property
    def checks_records(self) -> bool:
        return self.keys_required or self.before_ms is not None or self.after_ms is not None


def produce_rules(configs: dict[str, str], default_max_bytes: int) -> ProduceRules:
    """The rules of a topic with these configs (values were checked at creation; one that
    does not parse counts as unset)."""
    if not configs:
        return ProduceRules(default_max_bytes)
    log_append_time = configs.get(TIMESTAMP_TYPE) == LOG_APPEND_TIME
    before = after = None
    if not log_append_time:  # Kafka checks CreateTime stamps only
        difference = _long(configs, TIMESTAMP_DIFFERENCE)
        # KIP-937: before/after left at their default fall back to difference.max.ms
        before = _limit(_long(configs, TIMESTAMP_BEFORE), difference)
        after = _limit(_long(configs, TIMESTAMP_AFTER), difference)
    return ProduceRules(
        _long(configs, MAX_MESSAGE_BYTES, default_max_bytes),
        log_append_time,
        "compact" in configs.get(CLEANUP_POLICY, ""),
        before,
        after,
    )


def _long(configs: dict[str, str], name: str, default: int = LONG_MAX) -> int:
    value = configs.get(name)
    if value is None:
        return default
    try:
        return int(value.strip())
    except ValueError:
        return default


def _limit(own: int, difference: int) -> int | None:
    value = own if own != LONG_MAX else difference
    return None if value == LONG_MAX else value


async def describe_configs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    """Every entry with its Kafka type (v3+), source and, when asked, documentation."""
    documented = bool(request.get("include_documentation"))
    results = []
    pace = context.turns.pace()  # thousands of resources must not hold the loop
    for resource in request["resources"]:
        await pace.step()
        kind, name = resource["resource_type"], resource["resource_name"]
        asked = resource.get("configuration_keys")
        keys = None if asked is None else set(asked)
        result: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": (),  # shared: no object per resource refused (GC walks fewer)
        }
        if kind == TOPIC:
            record = context.topics.get(context.pulsar_name(name))
            if not topic_allowed(context, name, DESCRIBE_CONFIGS):  # as Kafka
                result.update(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message="Authorization failed.",
                )
            elif record is None:
                result.update(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"Topic {name} does not exist",
                )
            else:
                values = topic_configs(record, context.settings)
                result["configs"] = [
                    _topic_entry(key, value, key in record.configs, documented)
                    for key, value in sorted(values.items())
                    if keys is None or key in keys
                ]
        elif kind == BROKER and not cluster_allowed(context, DESCRIBE_CONFIGS):
            result.update(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message="Authorization failed.",
            )
        elif kind == BROKER:
            result["configs"] = [
                {
                    "name": config.name,
                    "value": value,
                    "read_only": True,  # no dynamic broker configs (alter_configs.py)
                    "is_default": source == DEFAULT_CONFIG,
                    "config_source": source,
                    "is_sensitive": config.sensitive,
                    "synonyms": [],
                    "config_type": CONFIG_TYPES[config.kind],
                    "documentation": config.documentation if documented else None,
                }
                for config, value, source in broker_entries(context.settings, context.identity)
                if keys is None or config.name in keys
            ]
        elif kind == GROUP:
            result.update(describe_group(context, name, keys, documented))
        else:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"resource type {kind} is not supported",
            )
        await pace.step(len(result["configs"]))
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def _topic_entry(name: str, value: str, set_here: bool, documented: bool) -> dict[str, Any]:
    config = TOPIC_CONFIGS[name]
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "is_default": not set_here,
        "config_source": DYNAMIC_TOPIC_CONFIG if set_here else DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": CONFIG_TYPES[config.kind],
        "documentation": (config.honoured or _ACCEPTED) if documented else None,
    }


_ACCEPTED = (
    "Accepted, checked as Kafka checks it and shown; Pulsar does the storing, so it changes"
    " nothing here (docs/kafka-configs.md)."
)
