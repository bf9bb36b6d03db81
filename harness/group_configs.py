"""Set a consumer or share group's own config, as an operator does with AdminClient's
IncrementalAlterConfigs on a GROUP resource (share.auto.offset.reset and the like)."""

from __future__ import annotations

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def set_group_config(admin: AdminClient, group: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
