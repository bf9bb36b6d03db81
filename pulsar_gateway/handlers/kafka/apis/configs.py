"""DescribeConfigs, and the topic configs the gateway knows and checks."""

from __future__ import annotations

from typing import Any

from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import TopicRecord
from pulsar_gateway.kafka_codec.entry_format import ENTRY_FORMATS, FORMAT_CONFIG
from pulsar_gateway.kafka_codec.errors import ErrorCode

TOPIC = 2
BROKER = 4

# Kafka's defaults, shown for every topic; values set at creation override them.
TOPIC_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "max.message.bytes": "104857600",
    "message.timestamp.type": "CreateTime",
    "retention.bytes": "-1",
    "retention.ms": "-1",
    "segment.bytes": "1073741824",
    "min.insync.replicas": "1",
}
_ENUMS = {
    FORMAT_CONFIG: set(ENTRY_FORMATS),
    "cleanup.policy": {"delete", "compact", "compact,delete", "delete,compact"},
    "compression.type": {"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
}
_INTEGERS = {
    "max.message.bytes",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "min.insync.replicas",
}


def validate_configs(configs: dict[str, str | None]) -> str | None:
    for key, value in configs.items():
        if value is None:
            continue
        if key in _ENUMS and value not in _ENUMS[key]:
            return f"Invalid value {value} for configuration {key}"
        if key in _INTEGERS:
            try:
                int(value)
            except ValueError:
                return f"Invalid value {value} for configuration {key}: Not a number of type LONG"
    return None


def topic_configs(record: TopicRecord, entry_format: str = "pulsar") -> dict[str, str]:
    """Kafka's defaults, the gateway's entry format, then what the topic set."""
    merged = dict(TOPIC_DEFAULTS)
    merged[FORMAT_CONFIG] = entry_format
    merged.update(record.configs)
    return merged


async def describe_configs(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    results = []
    for resource in request["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        keys = resource.get("configuration_keys")
        result: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": [],
        }
        if kind == TOPIC:
            record = context.topics.get(context.pulsar_name(name))
            if record is None:
                result.update(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"Topic {name} does not exist",
                )
            else:
                values = topic_configs(record, context.settings.entry_format)
                result["configs"] = [
                    _entry(key, value, key not in record.configs)
                    for key, value in sorted(values.items())
                    if keys is None or key in keys
                ]
        elif kind == BROKER:
            values = {
                "auto.create.topics.enable": str(context.settings.auto_create_topics).lower(),
                "num.partitions": str(context.settings.default_partitions),
                "message.max.bytes": str(context.settings.max_frame_bytes),
            }
            result["configs"] = [
                _entry(key, value, True)
                for key, value in sorted(values.items())
                if keys is None or key in keys
            ]
        else:
            result.update(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"resource type {kind} is not supported",
            )
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def _entry(name: str, value: str, is_default: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "is_default": is_default,
        "config_source": 5 if is_default else 1,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }
