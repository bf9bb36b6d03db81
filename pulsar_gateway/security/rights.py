"""What a user may do: the permission model both protocols are checked against.

A user's rights are a list of grants, each an operation set on one resource pattern, plus
a superuser flag (docs/security.md, "Authorization"):

- `namespace` grants cover Pulsar namespaces, where Kafka topics (`tenant/ns/topic`, a
  short name in `kafka.tenant/kafka.namespace`) and AMQP vhosts (one namespace each) live.
  The pattern is `tenant/ns`, `tenant/*` (every namespace of the tenant) or `*` (all).
  Rights are kept per namespace, not per topic or queue: a namespace is what a team owns
  on a shared Pulsar cluster.
- `group` grants cover Kafka consumer groups: a name, `prefix*`, or `*`.
- `cluster` grants cover the gateway as a whole (Kafka's CLUSTER resource): creating topics
  anywhere, listing every group, managing the ACLs, idempotent producers.
- `transactional_id` grants cover Kafka transactional ids (Kafka's TRANSACTIONAL_ID): a
  name, `prefix*`, or `*`. `write` lets a producer use the id (and so fence the producer
  that had it before), `describe` lets a user see its transaction. Like Kafka, an id is
  nobody's until granted: without a grant a user cannot take over another's producer.

Operations are Kafka's names, which AMQP's configure/write/read split maps onto: `read`,
`write`, `describe`, `create`, `delete`, `alter`, and on the cluster `idempotent_write`.
As in Kafka, `read`, `write`, `delete` and `alter` imply `describe`. `admin` is shorthand
for create, delete and alter; `all` for every operation.

Pure values and functions: the store keeps records (`to_record`/`from_record`), the
authorizer (handlers/authorization.py) asks `Rights.allows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NAMESPACE = "namespace"
GROUP = "group"
CLUSTER = "cluster"
TRANSACTIONAL_ID = "transactional_id"
RESOURCES = (NAMESPACE, GROUP, CLUSTER, TRANSACTIONAL_ID)
# resources named by a name, `prefix*` or `*` (a namespace pattern is `tenant/ns`-shaped)
NAMED_RESOURCES = (GROUP, TRANSACTIONAL_ID)

READ = "read"
WRITE = "write"
DESCRIBE = "describe"
CREATE = "create"
DELETE = "delete"
ALTER = "alter"
IDEMPOTENT_WRITE = "idempotent_write"

OPERATIONS: dict[str, tuple[str, ...]] = {
    NAMESPACE: (READ, WRITE, DESCRIBE, CREATE, DELETE, ALTER),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (DESCRIBE, CREATE, ALTER, IDEMPOTENT_WRITE),
    TRANSACTIONAL_ID: (WRITE, DESCRIBE),
}
SHORTHANDS: dict[str, tuple[str, ...]] = {"admin": (CREATE, DELETE, ALTER)}
# Kafka's implication: an operation that needs to see the resource lets it be described
IMPLIES_DESCRIBE = frozenset({READ, WRITE, DELETE, ALTER})
MAX_GRANTS = 1000  # per user: a record stays small enough to load and check quickly


class RightsError(ValueError):
    """A grant that the model cannot hold; the message says which rule it breaks."""


@dataclass(frozen=True, slots=True)
class Grant:
    """Operations on one resource pattern; `name` ends in `*` for a prefix."""

    resource: str
    name: str
    operations: frozenset[str]

    @property
    def prefix(self) -> str | None:
        """The prefix a `*` pattern stands for, None for a literal name."""
        return self.name[:-1] if self.name.endswith("*") else None

    def covers(self, name: str) -> bool:
        """Whether the pattern matches `name` (a namespace `tenant/ns` or a group)."""
        if self.resource == CLUSTER:
            return True
        prefix = self.prefix
        return name == self.name if prefix is None else name.startswith(prefix)

    def grants(self, operation: str) -> bool:
        if operation in self.operations:
            return True
        return operation == DESCRIBE and not self.operations.isdisjoint(IMPLIES_DESCRIBE)


@dataclass(frozen=True, slots=True)
class Rights:
    """One user's rights."""

    grants: tuple[Grant, ...] = ()
    superuser: bool = False

    def allows(self, resource: str, name: str, operation: str) -> bool:
        if self.superuser:
            return True
        return any(
            grant.resource == resource and grant.covers(name) and grant.grants(operation)
            for grant in self.grants
        )

    def allows_some(self, resource: str, name: str) -> bool:
        """Whether some grant covering `name` gives any operation (AMQP's vhost access)."""
        return self.superuser or any(
            grant.resource == resource and grant.covers(name) and grant.operations
            for grant in self.grants
        )

    def allows_any(self, resource: str, operation: str) -> bool:
        """Whether some grant on `resource` gives `operation` (on any name)."""
        return self.superuser or any(
            grant.resource == resource and grant.grants(operation) for grant in self.grants
        )

    @property
    def empty(self) -> bool:
        return not self.grants and not self.superuser


NO_RIGHTS = Rights()


def expand_operations(resource: str, words: Iterable[str]) -> frozenset[str]:
    """Operation words (shorthands `admin`, `all` included) -> the resource's operations."""
    valid = OPERATIONS[resource]
    out: set[str] = set()
    for word in words:
        word = word.strip().lower().replace("-", "_")
        if word == "all":
            out.update(valid)
        elif word in SHORTHANDS:
            out.update(op for op in SHORTHANDS[word] if op in valid)
        elif word in valid:
            out.add(word)
        else:
            raise RightsError(
                f"operation '{word}' does not apply to a {resource}; "
                f"one of {', '.join((*valid, *SHORTHANDS, 'all'))}"
            )
    if not out:
        raise RightsError("no operation given")
    return frozenset(out)


def check_pattern(resource: str, name: str) -> str:
    """The pattern, validated: namespaces `tenant/ns`, `tenant/*` or `*`; groups and
    transactional ids a name, `prefix*` or `*`; the cluster has none (empty)."""
    if resource == CLUSTER:
        return ""
    if resource in NAMED_RESOURCES:
        if not name or "*" in name[:-1]:
            what = resource.replace("_", " ")
            raise RightsError(f"a {what} pattern is a name, 'prefix*' or '*'")
        return name
    if resource != NAMESPACE:
        raise RightsError(f"unknown resource '{resource}'; one of {', '.join(RESOURCES)}")
    parts = name.split("/")
    star_ok = name == "*" or (len(parts) == 2 and parts[1] == "*" and "*" not in parts[0])
    literal_ok = len(parts) == 2 and all(parts) and "*" not in name
    if not (star_ok or literal_ok) or any(part in (".", "..") for part in parts):
        raise RightsError("a namespace pattern is 'tenant/namespace', 'tenant/*' or '*'")
    return name


def grant(rights: Rights, resource: str, name: str, operations: Iterable[str]) -> Rights:
    """`rights` with `operations` added on the pattern (merged into an existing grant)."""
    name = check_pattern(resource, name)
    ops = expand_operations(resource, operations)
    grants = list(rights.grants)
    for position, existing in enumerate(grants):
        if existing.resource == resource and existing.name == name:
            grants[position] = Grant(resource, name, existing.operations | ops)
            break
    else:
        if len(grants) >= MAX_GRANTS:
            raise RightsError(f"a user holds at most {MAX_GRANTS} grants")
        grants.append(Grant(resource, name, ops))
    return Rights(tuple(grants), rights.superuser)


def revoke(
    rights: Rights, resource: str, name: str, operations: Iterable[str] = ("all",)
) -> Rights:
    """`rights` without `operations` on the pattern (a grant left with none is dropped)."""
    name = check_pattern(resource, name)
    ops = expand_operations(resource, operations)
    grants = []
    for existing in rights.grants:
        if existing.resource == resource and existing.name == name:
            left = existing.operations - ops
            if left:
                grants.append(Grant(resource, name, left))
        else:
            grants.append(existing)
    return Rights(tuple(grants), rights.superuser)


def with_superuser(rights: Rights, superuser: bool) -> Rights:
    return Rights(rights.grants, superuser)


def to_record(rights: Rights) -> dict[str, Any]:
    """The JSON record the users store keeps (key `rights/<user>`)."""
    return {
        "superuser": rights.superuser,
        "grants": [
            {"resource": g.resource, "name": g.name, "operations": sorted(g.operations)}
            for g in rights.grants
        ],
    }


def from_record(record: Mapping[str, Any]) -> Rights:
    """A stored record -> Rights; RightsError for a record the model cannot hold (written
    by a newer gateway, or by hand): the caller skips it, and the user has no rights."""
    raw = record.get("grants", [])
    if not isinstance(raw, list) or len(raw) > MAX_GRANTS:
        raise RightsError(f"grants must be a list of at most {MAX_GRANTS} entries")
    grants = []
    for item in raw:
        if not isinstance(item, dict):
            raise RightsError("a grant must be an object")
        resource, name, operations = item.get("resource"), item.get("name"), item.get("operations")
        if not isinstance(resource, str) or not isinstance(name, str):
            raise RightsError("a grant needs a resource and a name")
        if resource not in OPERATIONS:
            raise RightsError(f"unknown resource '{resource}'")
        if not isinstance(operations, list) or not all(isinstance(op, str) for op in operations):
            raise RightsError("a grant's operations must be a list of names")
        grants.append(
            Grant(resource, check_pattern(resource, name), expand_operations(resource, operations))
        )
    return Rights(tuple(grants), record.get("superuser") is True)


@dataclass
class RightsTable:
    """Rights by user name, in memory: what a store without Pulsar (the unit tests, a
    gateway without a users store) holds."""

    rights: dict[str, Rights] = field(default_factory=dict)

    def rights_of(self, user: str) -> Rights:
        return self.rights.get(user, NO_RIGHTS)

    def all_rights(self) -> Mapping[str, Rights]:
        return dict(self.rights)

    async def set_rights(self, user: str, rights: Rights) -> None:
        if rights.empty:
            self.rights.pop(user, None)
        else:
            self.rights[user] = rights
