"""DescribeAcls, CreateAcls, DeleteAcls: Kafka's ACL APIs over the gateway's rights.

Kafka ACLs and the gateway's grants (security/rights.py) say the same thing in two shapes,
so the APIs translate, and keep nothing of their own: what CreateAcls adds,
`pulsar-gateway users rights` shows, and the reverse. One ACL binding is one operation of
one grant, for principal `User:<name>`, host `*`, ALLOW:

| Kafka resource pattern            | grant                          |
| --------------------------------- | ------------------------------ |
| TOPIC PREFIXED `tenant/ns/`       | namespace `tenant/ns`          |
| TOPIC PREFIXED `tenant/`          | namespace `tenant/*`           |
| TOPIC LITERAL `*`                 | namespace `*`                  |
| GROUP LITERAL `name` (or `*`)     | group `name` (or `*`)          |
| GROUP PREFIXED `prefix`           | group `prefix*`                |
| CLUSTER LITERAL `kafka-cluster`   | cluster                        |
| TRANSACTIONAL_ID LITERAL `id` (or `*`) | transactional_id `id` (or `*`) |
| TRANSACTIONAL_ID PREFIXED `prefix` | transactional_id `prefix*`    |

What the model cannot hold is refused with INVALID_REQUEST and a message saying what can
be: a literal topic or a prefix that is not a namespace (rights are per namespace), DENY,
a host other than `*`, a principal other than `User:<name>`, DELEGATION_TOKEN resources,
and operations the resource has no use for. A grant holding
every operation of its resource is shown as one ALL binding. A superuser (the record's
flag or `authorization.superusers`) has no ACL to show.

Rights needed, as Kafka: DescribeAcls DESCRIBE on the cluster, CreateAcls and DeleteAcls
ALTER on the cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, NamedTuple

from pulsar_gateway.handlers.kafka.authorization import CLUSTER_NAME, cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Grant, Rights, RightsError

# Kafka's enums (org.apache.kafka.common.resource / acl)
RESOURCE_ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 1, 2, 3, 4, 5
PATTERN_ANY, PATTERN_MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
OP_ANY, OP_ALL = 1, 2
PERMISSION_ANY, DENY, ALLOW = 1, 2, 3
OPERATIONS = {
    3: model.READ,
    4: model.WRITE,
    5: model.CREATE,
    6: model.DELETE,
    7: model.ALTER,
    8: model.DESCRIBE,
    12: model.IDEMPOTENT_WRITE,
}
OPERATION_CODES = {name: code for code, name in OPERATIONS.items()}
RESOURCES = {
    TOPIC: model.NAMESPACE,
    GROUP: model.GROUP,
    CLUSTER: model.CLUSTER,
    TRANSACTIONAL_ID: model.TRANSACTIONAL_ID,
}
# the Kafka resources named by a name, a prefix or `*`, as the model's named resources
NAMED = {GROUP: model.GROUP, TRANSACTIONAL_ID: model.TRANSACTIONAL_ID}
NAMED_KAFKA = {resource: kind for kind, resource in NAMED.items()}
PRINCIPAL_PREFIX = "User:"
CANNOT = (
    "the gateway keeps rights per Pulsar namespace, group, transactional id and cluster "
    "(docs/security.md)"
)
NOT_STORED = "the rights could not be stored; try again"

log = logging.getLogger("gateway.kafka.admin")


class Binding(NamedTuple):
    """One Kafka ACL binding (always host `*`, ALLOW)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    user: str
    operation: int


class Unrepresentable(Exception):
    """A binding the rights model cannot hold; the message is the client's."""


def kafka_pattern(grant: Grant) -> tuple[int, str, int]:
    """(resource type, name, pattern type) of a grant's resource."""
    if grant.resource == model.CLUSTER:
        return CLUSTER, CLUSTER_NAME, LITERAL
    prefix = grant.prefix
    if grant.resource in NAMED_KAFKA:
        kind = NAMED_KAFKA[grant.resource]
        if grant.name == "*" or prefix is None:
            return kind, grant.name, LITERAL
        return kind, prefix, PREFIXED
    if grant.name == "*":
        return TOPIC, "*", LITERAL
    return TOPIC, (prefix if prefix is not None else grant.name + "/"), PREFIXED


def grant_pattern(resource_type: int, name: str, pattern_type: int) -> tuple[str, str]:
    """(model resource, pattern) of a Kafka resource pattern; Unrepresentable otherwise."""
    if resource_type == CLUSTER:
        if name != CLUSTER_NAME or pattern_type != LITERAL:
            raise Unrepresentable(f"the cluster resource is LITERAL '{CLUSTER_NAME}'")
        return model.CLUSTER, ""
    if resource_type in NAMED:
        resource = NAMED[resource_type]
        if not name or ("*" in name and (name, pattern_type) != ("*", LITERAL)):
            what = resource.replace("_", " ")
            raise Unrepresentable(f"a {what} pattern is a name or prefix without '*', or '*'")
        if pattern_type == LITERAL:
            return resource, name
        if pattern_type == PREFIXED:
            return resource, name + "*"
    elif resource_type == TOPIC:
        if pattern_type == LITERAL and name == "*":
            return model.NAMESPACE, "*"
        parts = name.split("/")
        if pattern_type == PREFIXED and name.endswith("/") and len(parts) in (2, 3):
            pattern = name[:-1] if len(parts) == 3 else name + "*"
            try:
                return model.NAMESPACE, model.check_pattern(model.NAMESPACE, pattern)
            except RightsError:
                pass
        raise Unrepresentable(
            f"topic pattern {_pattern_name(pattern_type)} '{name}' refused: {CANNOT}; use "
            "PREFIXED 'tenant/namespace/', PREFIXED 'tenant/' or LITERAL '*'"
        )
    else:
        raise Unrepresentable(f"resource type {resource_type} refused: {CANNOT}")
    raise Unrepresentable(f"pattern type {_pattern_name(pattern_type)} refused: {CANNOT}")


def _pattern_name(pattern_type: int) -> str:
    names = {LITERAL: "LITERAL", PREFIXED: "PREFIXED", PATTERN_MATCH: "MATCH", PATTERN_ANY: "ANY"}
    return names.get(pattern_type, str(pattern_type))


def bindings(user: str, rights: Rights) -> Iterator[Binding]:
    """The Kafka ACL bindings a user's grants read as."""
    for grant in rights.grants:
        resource_type, name, pattern_type = kafka_pattern(grant)
        if grant.operations >= set(model.OPERATIONS[grant.resource]):
            yield Binding(resource_type, name, pattern_type, user, OP_ALL)
            continue
        for operation in sorted(grant.operations):
            yield Binding(resource_type, name, pattern_type, user, OPERATION_CODES[operation])


def user_of(principal: str) -> str:
    if not principal.startswith(PRINCIPAL_PREFIX) or principal in ("User:", "User:*"):
        raise Unrepresentable(f"principal refused: only 'User:<name>' ({CANNOT})")
    return principal[len(PRINCIPAL_PREFIX) :]


def matches(binding: Binding, acl_filter: dict[str, Any]) -> bool:
    """Kafka's AclBindingFilter.matches, for the bindings the gateway can hold."""
    kind = acl_filter["resource_type_filter"]
    if kind != RESOURCE_ANY and kind != binding.resource_type:
        return False
    name = acl_filter.get("resource_name_filter")
    pattern = acl_filter.get("pattern_type_filter", LITERAL)
    if pattern == PATTERN_MATCH:
        if name is not None and not _covers(binding, name):
            return False
    else:
        if pattern != PATTERN_ANY and pattern != binding.pattern_type:
            return False
        if name is not None and name != binding.resource_name:
            return False
    principal = acl_filter.get("principal_filter")
    if principal is not None and principal != PRINCIPAL_PREFIX + binding.user:
        return False
    host = acl_filter.get("host_filter")
    if host is not None and host != "*":
        return False
    operation = acl_filter["operation"]
    if operation != OP_ANY and operation != binding.operation:
        return False
    return acl_filter["permission_type"] in (PERMISSION_ANY, ALLOW)


def _covers(binding: Binding, name: str) -> bool:
    """MATCH: the binding's pattern applies to a resource called `name`."""
    if binding.pattern_type == PREFIXED:
        return name.startswith(binding.resource_name)
    return binding.resource_name in (name, "*")


def _every_binding(context: KafkaContext) -> list[Binding]:
    found: list[Binding] = []
    for user, rights in sorted(context.authorizer.store.all_rights().items()):
        found.extend(bindings(user, rights))
    return found


async def describe_acls(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    if not cluster_allowed(context, model.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "resources": [],
        }
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    # every grant of every user: paced, so that a large rights store does not hold the loop
    async for binding in context.turns.paced(_every_binding(context)):
        if matches(binding, request):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(_acl(binding))
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resources": [
            {"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": acls}
            for (kind, name, pattern), acls in grouped.items()
        ],
    }


def _acl(binding: Binding) -> dict[str, Any]:
    return {
        "principal": PRINCIPAL_PREFIX + binding.user,
        "host": "*",
        "operation": binding.operation,
        "permission_type": ALLOW,
    }


def _creation(creation: dict[str, Any]) -> tuple[str, str, str, list[str]]:
    """(user, model resource, pattern, operation words) of one creation."""
    if creation["permission_type"] != ALLOW:
        raise Unrepresentable(f"only ALLOW ACLs can be held ({CANNOT})")
    if creation["host"] != "*":
        raise Unrepresentable(f"only host '*' can be held ({CANNOT})")
    user = user_of(creation["principal"])
    resource, pattern = grant_pattern(
        creation["resource_type"],
        creation["resource_name"],
        creation.get("resource_pattern_type", LITERAL),
    )
    operation = creation["operation"]
    if operation == OP_ALL:
        return user, resource, pattern, ["all"]
    if operation not in OPERATIONS:
        raise Unrepresentable(f"operation {operation} refused: {CANNOT}")
    return user, resource, pattern, [OPERATIONS[operation]]


async def create_acls(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    creations = request["creations"]
    if not cluster_allowed(context, model.ALTER):
        refused = {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
        }
        return {"throttle_time_ms": 0, "results": [dict(refused) for _ in creations]}
    store = context.authorizer.store
    changed: dict[str, Rights] = {}
    positions: dict[str, list[int]] = {}  # the creations of each user
    results: list[dict[str, Any]] = []
    for index, creation in enumerate(creations):
        try:
            user, resource, pattern, operations = _creation(creation)
            current = changed.get(user) or store.rights_of(user)
            changed[user] = model.grant(current, resource, pattern, operations)
        except (Unrepresentable, RightsError) as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
            continue
        positions.setdefault(user, []).append(index)
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    for user, rights in changed.items():
        failure = await _store(context, user, rights)
        if failure is None:
            continue
        for index in positions[user]:
            results[index] = {"error_code": failure[0], "error_message": failure[1]}
    return {"throttle_time_ms": 0, "results": results}


async def _store(context: KafkaContext, user: str, rights: Rights) -> tuple[int, str] | None:
    """Write one user's rights; (error code, message) when that failed."""
    try:
        await context.authorizer.store.set_rights(user, rights)
    except ValueError as exc:  # a user name the store refuses
        return ErrorCode.INVALID_REQUEST, str(exc)
    except Exception as exc:  # the store's backend: the client may retry
        log.warning("storing the rights of '%s' failed: %s", user, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, NOT_STORED
    return None


async def delete_acls(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    filters = request["filters"]
    if not cluster_allowed(context, model.ALTER):
        return {
            "throttle_time_ms": 0,
            "filter_results": [
                {
                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "Authorization failed.",
                    "matching_acls": [],
                }
                for _ in filters
            ],
        }
    store = context.authorizer.store
    every = _every_binding(context)
    doomed: set[Binding] = set()
    filter_results: list[dict[str, Any]] = []
    for acl_filter in filters:
        matched = [binding for binding in every if matches(binding, acl_filter)]
        doomed.update(matched)
        filter_results.append(
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "matching_acls": [_deleted(binding) for binding in matched],
            }
        )
    for user in sorted({binding.user for binding in doomed}):
        rights = store.rights_of(user)
        for binding in doomed:
            if binding.user == user:
                rights = _without(rights, binding)
        failure = await _store(context, user, rights)
        if failure is None:
            continue
        for result in filter_results:
            for acl in result["matching_acls"]:
                if acl["principal"] == PRINCIPAL_PREFIX + user:
                    acl.update(error_code=failure[0], error_message=failure[1])
    return {"throttle_time_ms": 0, "filter_results": filter_results}


def _without(rights: Rights, binding: Binding) -> Rights:
    resource, pattern = grant_pattern(
        binding.resource_type, binding.resource_name, binding.pattern_type
    )
    operation = "all" if binding.operation == OP_ALL else OPERATIONS[binding.operation]
    return model.revoke(rights, resource, pattern, [operation])


def _deleted(binding: Binding) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type,
        **_acl(binding),
    }
