"""Who owns what, for `/cluster` and `pulsar-gateway cluster status` (docs/cluster.md,
"Operations").

Pure: it asks the view for the owner of each key it is given. Ownership is a function of
the live members, so every member computes the same table from the same membership; two
members showing different tables is itself the sign of a split view worth a look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pulsar_gateway.gateway.cluster.view import ClusterView

# Keys listed one by one in the report, per kind; beyond it only the counts are exact
MAX_LISTED_KEYS = 1000


def ownership(
    view: ClusterView,
    keys: Mapping[str, Callable[[], Iterable[str]]],
    limit: int = MAX_LISTED_KEYS,
) -> dict[str, Any]:
    """The view's status plus, per kind of key (partitions, groups, vhosts), how many each
    member owns and the owner of the first `limit` keys."""
    counts: dict[str, dict[str, int]] = {}
    listed: dict[str, dict[str, str]] = {}
    truncated: list[str] = []
    for kind, source in keys.items():
        per_member: dict[str, int] = {member.member_id: 0 for member in view.members()}
        owners: dict[str, str] = {}
        for key in source():
            owner = view.owner(key).member_id
            per_member[owner] = per_member.get(owner, 0) + 1
            if len(owners) < limit:
                owners[key] = owner
            elif kind not in truncated:
                truncated.append(kind)
        counts[kind] = per_member
        listed[kind] = owners
    return {**view.status(), "owned_by_member": counts, "owners": listed, "truncated": truncated}
