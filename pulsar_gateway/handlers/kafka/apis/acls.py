"""DescribeAcls, CreateAcls, DeleteAcls: Kafka's ACL APIs over the gateway's rights.

The rights model is Kafka's (security/rights.py): a rule is an ACL binding whose principal
is the user whose record holds it (`User:*`'s are the record of the user `*`), so the
APIs translate enums and keep nothing of their own: what CreateAcls adds,
`pulsar-gateway users rights` shows, and the reverse; `users grant --namespace` rules are
PREFIXED topic bindings like any other.

Kafka's semantics throughout (docs/security.md, "Authorization"): CreateAcls takes
LITERAL or PREFIXED patterns on TOPIC, GROUP, TRANSACTIONAL_ID and CLUSTER (LITERAL
`kafka-cluster`), ALLOW or DENY, a `User:` principal or `User:*`, host `*` or an IP
address, any concrete operation; a binding already held is not added twice.
DescribeAcls and DeleteAcls take filters with ANY, and MATCH for patterns (every binding
that applies to the named resource: LITERAL equal or `*`, PREFIXED a prefix of it), and
DeleteAcls answers with the bindings it removed. Refused with INVALID_REQUEST and a
message: the resource types the gateway does not serve (DELEGATION_TOKEN, USER), other
principal types, host names, and the token operations.

Rights needed, as Kafka: DescribeAcls DESCRIBE on the cluster, CreateAcls and DeleteAcls
ALTER on the cluster.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from pulsar_gateway.handlers.kafka.authorization import OPERATION_CODES, cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.rights import Rights, RightsError, Rule

# Kafka's enums (org.apache.kafka.common.resource / acl)
RESOURCE_ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 1, 2, 3, 4, 5
PATTERN_ANY, PATTERN_MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
OP_ANY = 1
PERMISSION_ANY, DENY, ALLOW = 1, 2, 3
OPERATIONS = {code: name for name, code in OPERATION_CODES.items()}
RESOURCES = {
    TOPIC: model.TOPIC,
    GROUP: model.GROUP,
    CLUSTER: model.CLUSTER,
    TRANSACTIONAL_ID: model.TRANSACTIONAL_ID,
}
RESOURCE_CODES = {name: code for code, name in RESOURCES.items()}
PATTERNS = {LITERAL: model.LITERAL, PREFIXED: model.PREFIXED}
PATTERN_CODES = {name: code for code, name in PATTERNS.items()}
PERMISSIONS = {ALLOW: model.ALLOW, DENY: model.DENY}
PERMISSION_CODES = {name: code for code, name in PERMISSIONS.items()}
PRINCIPAL_PREFIX = "User:"
NOT_STORED = "the rights could not be stored; try again"

log = logging.getLogger("gateway.kafka.admin")


class Binding(NamedTuple):
    """One Kafka ACL binding: a user (`*` for `User:*`) and one of its rules."""

    user: str
    rule: Rule

    @property
    def resource_type(self) -> int:
        return RESOURCE_CODES[self.rule.resource]

    @property
    def pattern_type(self) -> int:
        return PATTERN_CODES[self.rule.pattern]


class Refused(Exception):
    """A creation Kafka's model (or the gateway's subset of it) refuses; the message is
    the client's."""


def user_of(principal: str) -> str:
    """`User:name` -> `name` (`User:*` -> `*`, every user's rules)."""
    if not principal.startswith(PRINCIPAL_PREFIX) or principal == PRINCIPAL_PREFIX:
        raise Refused(f"principal '{principal[:100]}' refused: the gateway's are 'User:<name>'")
    return principal[len(PRINCIPAL_PREFIX) :]


def rule_of(creation: dict[str, Any]) -> tuple[str, Rule]:
    """(user, rule) of one creation; Refused with Kafka's reason otherwise."""
    resource = RESOURCES.get(creation["resource_type"])
    if resource is None:
        raise Refused(f"resource type {creation['resource_type']} is not served")
    pattern = PATTERNS.get(creation.get("resource_pattern_type", LITERAL))
    if pattern is None:
        raise Refused("a pattern type is LITERAL or PREFIXED")
    operation = OPERATIONS.get(creation["operation"])
    if operation is None:
        raise Refused(f"operation {creation['operation']} is not one an ACL can hold")
    permission = PERMISSIONS.get(creation["permission_type"])
    if permission is None:
        raise Refused("a permission type is ALLOW or DENY")
    user = user_of(creation["principal"])
    try:
        rule = model.make_rule(
            resource, pattern, creation["resource_name"], operation, permission, creation["host"]
        )
    except RightsError as exc:
        raise Refused(str(exc)) from None
    return user, rule


def matches(binding: Binding, acl_filter: dict[str, Any]) -> bool:
    """Kafka's AclBindingFilter.matches."""
    rule = binding.rule
    kind = acl_filter["resource_type_filter"]
    if kind != RESOURCE_ANY and kind != binding.resource_type:
        return False
    pattern = acl_filter.get("pattern_type_filter", LITERAL)
    if pattern not in (PATTERN_ANY, PATTERN_MATCH) and pattern != binding.pattern_type:
        return False
    name = acl_filter.get("resource_name_filter")
    if name is not None:
        if pattern in (PATTERN_ANY, binding.pattern_type):
            if name != rule.name:
                return False
        elif not rule.covers(name):  # MATCH: the binding applies to a resource so named
            return False
    principal = acl_filter.get("principal_filter")
    if principal is not None and principal != PRINCIPAL_PREFIX + binding.user:
        return False
    host = acl_filter.get("host_filter")
    if host is not None and host != rule.host:
        return False
    operation = acl_filter["operation"]
    if operation != OP_ANY and OPERATIONS.get(operation) != rule.operation:
        return False
    permission = acl_filter["permission_type"]
    return permission == PERMISSION_ANY or PERMISSIONS.get(permission) == rule.permission


def _every_binding(context: KafkaContext) -> list[Binding]:
    found: list[Binding] = []
    for user, rights in sorted(context.authorizer.store.all_rights().items()):
        found.extend(Binding(user, rule) for rule in rights.rules)
    return found


def _refused_filter(error: int, message: str) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "matching_acls": []}


def _filter_error(acl_filter: dict[str, Any]) -> str | None:
    """Kafka refuses filters with UNKNOWN (0) fields."""
    fields = ("resource_type_filter", "operation", "permission_type")
    if any(acl_filter.get(key) == 0 for key in (*fields, "pattern_type_filter")):
        return "a filter field is UNKNOWN"
    return None


async def describe_acls(
    context: KafkaContext, header: Any, request: dict[str, Any]
) -> dict[str, Any]:
    if not cluster_allowed(context, model.DESCRIBE):
        return _described(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
    error = _filter_error(request)
    if error is not None:
        return _described(ErrorCode.INVALID_REQUEST, error)
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    # every rule of every user: paced, so that a large rights store does not hold the loop
    async for binding in context.turns.paced(_every_binding(context)):
        if matches(binding, request):
            key = (binding.resource_type, binding.rule.name, binding.pattern_type)
            grouped.setdefault(key, []).append(_acl(binding))
    answer = _described(ErrorCode.NONE, None)
    answer["resources"] = [
        {"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": acls}
        for (kind, name, pattern), acls in grouped.items()
    ]
    return answer


def _described(error: int, message: str | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "resources": []}


def _acl(binding: Binding) -> dict[str, Any]:
    rule = binding.rule
    return {
        "principal": PRINCIPAL_PREFIX + binding.user,
        "host": rule.host,
        "operation": OPERATION_CODES[rule.operation],
        "permission_type": PERMISSION_CODES[rule.permission],
    }


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
            user, rule = rule_of(creation)
            current = changed.get(user) or store.rights_of(user)
            changed[user] = model.with_rules(current, [rule])
        except (Refused, RightsError) as exc:
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
        failed = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        refused = [_refused_filter(failed, "Authorization failed.") for _ in filters]
        return {"throttle_time_ms": 0, "filter_results": refused}
    store = context.authorizer.store
    every = _every_binding(context)
    doomed: set[Binding] = set()
    filter_results: list[dict[str, Any]] = []
    for acl_filter in filters:
        error = _filter_error(acl_filter)
        if error is not None:
            filter_results.append(_refused_filter(ErrorCode.INVALID_REQUEST, error))
            continue
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
        gone = [binding.rule for binding in doomed if binding.user == user]
        failure = await _store(context, user, model.without_rules(store.rights_of(user), gone))
        if failure is None:
            continue
        for result in filter_results:
            for acl in result["matching_acls"]:
                if acl["principal"] == PRINCIPAL_PREFIX + user:
                    acl.update(error_code=failure[0], error_message=failure[1])
    return {"throttle_time_ms": 0, "filter_results": filter_results}


def _deleted(binding: Binding) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": binding.resource_type,
        "resource_name": binding.rule.name,
        "pattern_type": binding.pattern_type,
        **_acl(binding),
    }
