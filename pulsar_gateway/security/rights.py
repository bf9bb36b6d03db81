"""What a user may do: Kafka's ACL model, the one both protocols are checked against.

A user's rights are a list of rules plus a superuser flag (docs/security.md,
"Authorization"). A rule is one Kafka ACL binding without its principal (the principal is
whose record holds it; `User:*`'s rules are the record of the user `*`):

- a resource type: `topic`, `group`, `transactional_id` or `cluster` (whose one name is
  `kafka-cluster`);
- a pattern: LITERAL (the name, or `*` for every name) or PREFIXED (every name starting
  with it);
- one operation, Kafka's: read, write, create, delete, alter, describe, cluster_action,
  describe_configs, alter_configs, idempotent_write, or all;
- ALLOW or DENY, and a host: `*` or one IP address the connection must come from.

Deciding is Kafka's: a superuser may do everything; else a DENY rule that matches the
resource, the host and the operation (or ALL) refuses; else some matching ALLOW rule must
grant the operation, where read, write, delete and alter imply describe and alter_configs
implies describe_configs (as in Kafka, implications apply to ALLOW only).

A topic answers to every name it has: `tenant/ns/name` always, and its short name when it
lives in the namespace short Kafka names map into (handlers/authorization.py works them
out); a rule matching any of them matches the topic, so a DENY cannot be sidestepped by
spelling a topic another way. AMQP queues and exchanges are topics of their vhost's
namespace by the same names.

The namespace grants of earlier versions (and `users grant --namespace`) are a convenience
on top: namespace `tenant/ns` is the topic pattern PREFIXED `tenant/ns/`, `tenant/*` is
PREFIXED `tenant/`, `*` is LITERAL `*`; a group or transactional id pattern `prefix*` is
PREFIXED `prefix`. `grant` and `revoke` below translate them; stored records of the old
shape are read through the same translation (`from_record`).

Pure values and functions: the store keeps records (`to_record`/`from_record`), the
authorizer (handlers/authorization.py) asks `Rights.allows`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TOPIC = "topic"
GROUP = "group"
CLUSTER = "cluster"
TRANSACTIONAL_ID = "transactional_id"
RESOURCE_TYPES = (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID)
NAMESPACE = "namespace"  # the convenience: topic patterns of a Pulsar namespace
CLUSTER_NAME = "kafka-cluster"  # Kafka's one CLUSTER resource name

LITERAL = "literal"
PREFIXED = "prefixed"
PATTERNS = (LITERAL, PREFIXED)
ALLOW = "allow"
DENY = "deny"
PERMISSIONS = (ALLOW, DENY)
ANY_HOST = "*"
EVERYONE = "*"  # the user whose rules are `User:*`'s

READ = "read"
WRITE = "write"
CREATE = "create"
DELETE = "delete"
ALTER = "alter"
DESCRIBE = "describe"
CLUSTER_ACTION = "cluster_action"
DESCRIBE_CONFIGS = "describe_configs"
ALTER_CONFIGS = "alter_configs"
IDEMPOTENT_WRITE = "idempotent_write"
ALL = "all"
OPERATIONS = (
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALL,
)
# what each resource has use for (Kafka's table of operations and resources): `grant`
# refuses the others, to catch a slip; the ACL APIs take any, as Kafka's do
USEFUL: dict[str, tuple[str, ...]] = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (
        CREATE,
        ALTER,
        DESCRIBE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
    ),
    TRANSACTIONAL_ID: (WRITE, DESCRIBE),
}
USEFUL[NAMESPACE] = USEFUL[TOPIC]
SHORTHANDS: dict[str, tuple[str, ...]] = {"admin": (CREATE, DELETE, ALTER)}
# Kafka's implications, for ALLOW rules: asking for the key, a rule for one of these grants
IMPLIED_BY: dict[str, frozenset[str]] = {
    DESCRIBE: frozenset({READ, WRITE, DELETE, ALTER}),
    DESCRIBE_CONFIGS: frozenset({ALTER_CONFIGS}),
}
MAX_RULES = 4000  # per user: a record stays small enough to load and check quickly


class RightsError(ValueError):
    """A rule that the model cannot hold; the message says which rule it breaks."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One ACL binding of the user whose record holds it."""

    resource: str
    pattern: str
    name: str
    operation: str
    permission: str = ALLOW
    host: str = ANY_HOST

    def covers(self, name: str) -> bool:
        if self.pattern == PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == "*"

    def covers_any(self, names: tuple[str, ...]) -> bool:
        literal = self.name
        if self.pattern == PREFIXED:
            for name in names:
                if name.startswith(literal):
                    return True
            return False
        return literal == "*" or literal in names

    def applies_from(self, host: str | None) -> bool:
        """A host-bound rule applies to connections from that host; with the host unknown
        (None) only a DENY does, so that not knowing never widens what a user may do."""
        if self.host == ANY_HOST:
            return True
        return self.host == host if host is not None else self.permission == DENY

    def grants(self, operation: str) -> bool:
        mine = self.operation
        if mine == operation or mine == ALL:
            return True
        return mine in IMPLIED_BY.get(operation, ())

    def refuses(self, operation: str) -> bool:
        return self.operation == operation or self.operation == ALL


@dataclass(frozen=True, slots=True)
class Rights:
    """One user's rights (or, merged, a user's and everyone's)."""

    rules: tuple[Rule, ...] = ()
    superuser: bool = False
    # per resource type, worked out once per value: LITERAL rules by name (looked up), the
    # PREFIXED and `*` ones (scanned), so a check costs the names' rules and the prefixes
    by_resource: dict[str, tuple[dict[str, list[Rule]], list[Rule]]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        for rule in self.rules:
            named, scanned = self.by_resource.setdefault(rule.resource, ({}, []))
            if rule.pattern == LITERAL and rule.name != "*":
                named.setdefault(rule.name, []).append(rule)
            else:
                scanned.append(rule)

    def allows(
        self, resource: str, names: str | tuple[str, ...], operation: str, host: str | None = None
    ) -> bool:
        """Kafka's decision for a resource that answers to `names` (one or several)."""
        if self.superuser:
            return True
        if isinstance(names, str):
            names = (names,)
        index = self.by_resource.get(resource)
        if index is None:
            return False
        named, scanned = index
        allowed = False
        for rules in (scanned, *(named.get(name, ()) for name in names)):
            for rule in rules:
                if rule.host != ANY_HOST and not rule.applies_from(host):
                    continue
                if rule.permission == DENY:
                    if rule.refuses(operation) and rule.covers_any(names):
                        return False
                elif not allowed and rule.grants(operation) and rule.covers_any(names):
                    allowed = True
        return allowed

    def allows_any(self, resource: str, operation: str, host: str | None = None) -> bool:
        """Whether `operation` is allowed on some resource of the type (Kafka's
        authorizeByResourceType, for an idempotent producer's WRITE on some topic): an
        ALLOW rule granting it that no DENY of the same operation covers entirely."""
        if self.superuser:
            return True
        for rule in self.rules:
            if rule.resource != resource or rule.permission != ALLOW:
                continue
            if not (rule.applies_from(host) and rule.grants(operation)):
                continue
            if rule.pattern == LITERAL and rule.name != "*":
                if self.allows(resource, rule.name, operation, host):
                    return True
            elif not any(_hides(deny, rule, operation, host) for deny in self.rules):
                return True
        return False

    def allows_some_topic_in(self, namespace: str, short: bool, host: str | None = None) -> bool:
        """Whether some ALLOW rule may cover a topic of the namespace `tenant/ns` (`short`:
        the namespace short names live in): opening an AMQP vhost needs that much."""
        if self.superuser:
            return True
        path = namespace + "/"
        for rule in self.rules:
            if rule.resource != TOPIC or rule.permission != ALLOW:
                continue
            if not rule.applies_from(host):
                continue
            if rule.pattern == LITERAL and (rule.name == "*" or rule.name.startswith(path)):
                return True
            if rule.pattern == PREFIXED and (
                path.startswith(rule.name) or rule.name.startswith(path)
            ):
                return True
            if short and "/" not in rule.name:
                return True
        return False

    def merged(self, other: Rights) -> Rights:
        """These rules and `other`'s (a user's and `User:*`'s); superuser from self."""
        if not other.rules:
            return self
        return Rights(self.rules + other.rules, self.superuser)

    @property
    def empty(self) -> bool:
        return not self.rules and not self.superuser


NO_RIGHTS = Rights()


def _hides(deny: Rule, allow: Rule, operation: str, host: str | None) -> bool:
    """Whether the DENY rule refuses `operation` on every name the ALLOW pattern covers."""
    if deny.permission != DENY or deny.resource != allow.resource:
        return False
    if not (deny.refuses(operation) and deny.applies_from(host)):
        return False
    return deny.name == "*" if deny.pattern == LITERAL else allow.name.startswith(deny.name)


def normal_host(host: str) -> str:
    """`*` or an IP address in its canonical text (an IPv4-mapped IPv6 as IPv4);
    RightsError for anything else (host names are not resolved, as in Kafka)."""
    host = host.strip()
    if host == ANY_HOST:
        return host
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise RightsError(f"host '{host[:100]}' is not '*' or an IP address") from None
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def make_rule(
    resource: str,
    pattern: str,
    name: str,
    operation: str,
    permission: str = ALLOW,
    host: str = ANY_HOST,
) -> Rule:
    """A validated rule; RightsError naming the broken rule otherwise."""
    if resource not in RESOURCE_TYPES:
        raise RightsError(f"unknown resource '{resource}'; one of {', '.join(RESOURCE_TYPES)}")
    if pattern not in PATTERNS:
        raise RightsError("a pattern is literal or prefixed")
    if operation not in OPERATIONS:
        raise RightsError(f"unknown operation '{operation}'; one of {', '.join(OPERATIONS)}")
    if permission not in PERMISSIONS:
        raise RightsError("a permission is allow or deny")
    if resource == CLUSTER and (pattern, name) != (LITERAL, CLUSTER_NAME):
        raise RightsError(f"the cluster resource is LITERAL '{CLUSTER_NAME}'")
    if pattern == LITERAL and not name:
        raise RightsError("a literal resource name is not empty")
    if pattern == PREFIXED and (not name or name == "*"):
        raise RightsError("a prefix is not empty and not '*' (LITERAL '*' is every name)")
    return Rule(resource, pattern, name, operation, permission, normal_host(host))


def with_rules(rights: Rights, rules: Iterable[Rule]) -> Rights:
    """`rights` with `rules` added; one already there is not added twice (as Kafka)."""
    present = set(rights.rules)
    added = list(rights.rules)
    for rule in rules:
        if rule not in present:
            present.add(rule)
            added.append(rule)
    if len(added) > MAX_RULES:
        raise RightsError(f"a user holds at most {MAX_RULES} rules")
    return Rights(tuple(added), rights.superuser)


def without_rules(rights: Rights, rules: Iterable[Rule]) -> Rights:
    gone = set(rules)
    return Rights(tuple(r for r in rights.rules if r not in gone), rights.superuser)


def expand_operations(resource: str, words: Iterable[str]) -> tuple[str, ...]:
    """Operation words (shorthand `admin` included) -> operations useful on the resource."""
    valid = USEFUL[resource]
    out: list[str] = []
    for word in words:
        word = word.strip().lower().replace("-", "_")
        if word in SHORTHANDS:
            found: tuple[str, ...] = tuple(op for op in SHORTHANDS[word] if op in valid)
        else:
            found = (word,)
        if word != ALL and (not found or not all(op in valid for op in found)):
            raise RightsError(
                f"operation '{word}' does not apply to a {resource.replace('_', ' ')}; "
                f"one of {', '.join((*valid, *SHORTHANDS, ALL))}"
            )
        out.extend(op for op in found if op not in out)
    if not out:
        raise RightsError("no operation given")
    return tuple(out)


def convenience_pattern(resource: str, name: str) -> tuple[str, str, str]:
    """(resource type, pattern, name) of a convenience pattern: a namespace `tenant/ns`,
    `tenant/*` or `*`; a group or transactional id name, `prefix*` or `*`; the cluster."""
    if resource == CLUSTER:
        return CLUSTER, LITERAL, CLUSTER_NAME
    if resource in (GROUP, TRANSACTIONAL_ID, TOPIC):
        if not name or "*" in name[:-1]:
            what = resource.replace("_", " ")
            raise RightsError(f"a {what} pattern is a name, 'prefix*' or '*'")
        if name == "*" or not name.endswith("*"):
            return resource, LITERAL, name
        return resource, PREFIXED, name[:-1]
    if resource != NAMESPACE:
        raise RightsError(f"unknown resource '{resource}'")
    parts = name.split("/")
    star_ok = name == "*" or (len(parts) == 2 and parts[1] == "*" and "*" not in parts[0])
    literal_ok = len(parts) == 2 and all(parts) and "*" not in name
    if not (star_ok or literal_ok) or any(part in (".", "..") for part in parts):
        raise RightsError("a namespace pattern is 'tenant/namespace', 'tenant/*' or '*'")
    if name == "*":
        return TOPIC, LITERAL, "*"
    return TOPIC, PREFIXED, name[:-1] if name.endswith("*") else name + "/"


def grant(
    rights: Rights,
    resource: str,
    name: str,
    operations: Iterable[str],
    permission: str = ALLOW,
    host: str = ANY_HOST,
) -> Rights:
    """`rights` with rules for `operations` on a convenience pattern (see above)."""
    kind, pattern, literal = convenience_pattern(resource, name)
    ops = expand_operations(resource, operations)
    rules = [make_rule(kind, pattern, literal, op, permission, host) for op in ops]
    return with_rules(rights, rules)


def revoke(
    rights: Rights,
    resource: str,
    name: str,
    operations: Iterable[str] = (ALL,),
    permission: str = ALLOW,
    host: str = ANY_HOST,
) -> Rights:
    """`rights` without the rules of `operations` on the pattern (`all`: every rule of
    the pattern, the permission and the host)."""
    kind, pattern, literal = convenience_pattern(resource, name)
    ops = set(expand_operations(resource, operations))
    host = normal_host(host)
    return Rights(
        tuple(
            r
            for r in rights.rules
            if not (
                (r.resource, r.pattern, r.name, r.permission, r.host)
                == (kind, pattern, literal, permission, host)
                and (ALL in ops or r.operation in ops)
            )
        ),
        rights.superuser,
    )


def with_superuser(rights: Rights, superuser: bool) -> Rights:
    return Rights(rights.rules, superuser)


def to_record(rights: Rights) -> dict[str, Any]:
    """The JSON record the users store keeps (key `rights/<user>`)."""
    return {
        "superuser": rights.superuser,
        "acls": [
            {
                "resource": r.resource,
                "pattern": r.pattern,
                "name": r.name,
                "operation": r.operation,
                "permission": r.permission,
                "host": r.host,
            }
            for r in rights.rules
        ],
    }


def from_record(record: Mapping[str, Any]) -> Rights:
    """A stored record -> Rights; RightsError for a record the model cannot hold (written
    by a newer gateway, or by hand): the caller skips it, and the user has no rights.
    A record of the earlier shape (`grants`: namespace, group, transactional id and cluster
    grants) is read as the rules its grants stand for: the upgrade path."""
    if not isinstance(record, Mapping):
        raise RightsError("a rights record is an object")
    rights = Rights(superuser=record.get("superuser") is True)
    if "grants" in record:
        rights = _upgraded(rights, record["grants"])
    raw = record.get("acls", [])
    if not isinstance(raw, list) or len(raw) > MAX_RULES:
        raise RightsError(f"acls must be a list of at most {MAX_RULES} entries")
    rules = []
    for item in raw:
        if not isinstance(item, dict):
            raise RightsError("an acl must be an object")
        keys = ("resource", "pattern", "name", "operation", "permission", "host")
        defaults = {"permission": ALLOW, "host": ANY_HOST}
        fields = [item.get(key, defaults.get(key)) for key in keys]
        if not all(isinstance(value, str) for value in fields):
            raise RightsError("an acl's fields are strings")
        rules.append(make_rule(*(str(value) for value in fields)))
    return with_rules(rights, rules)


# an old grant holding every operation of its resource was `all` (every operation then)
_OLD_ALL = {
    NAMESPACE: {READ, WRITE, DESCRIBE, CREATE, DELETE, ALTER},
    GROUP: {READ, DESCRIBE, DELETE},
    CLUSTER: {DESCRIBE, CREATE, ALTER, IDEMPOTENT_WRITE},
    TRANSACTIONAL_ID: {WRITE, DESCRIBE},
}


_CONFIGS = {DESCRIBE: DESCRIBE_CONFIGS, ALTER: ALTER_CONFIGS}


def _upgraded(rights: Rights, grants: Any) -> Rights:
    """Rules for the grants of a record written before rules existed."""
    if not isinstance(grants, list) or len(grants) > MAX_RULES:
        raise RightsError(f"grants must be a list of at most {MAX_RULES} entries")
    for item in grants:
        if not isinstance(item, dict):
            raise RightsError("a grant must be an object")
        resource, name, operations = item.get("resource"), item.get("name"), item.get("operations")
        if not isinstance(resource, str) or not isinstance(name, str):
            raise RightsError("a grant needs a resource and a name")
        if resource not in _OLD_ALL:
            raise RightsError(f"unknown resource '{resource}'")
        if not isinstance(operations, list) or not all(isinstance(op, str) for op in operations):
            raise RightsError("a grant's operations must be a list of names")
        words = [ALL] if set(operations) >= _OLD_ALL[resource] else list(operations)
        if resource in (NAMESPACE, CLUSTER) and words != [ALL]:  # configs were asked so
            words += [_CONFIGS[op] for op in operations if op in _CONFIGS]
        rights = grant(rights, resource, name, words)
    return rights


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
