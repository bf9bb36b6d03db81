"""DescribeUserScramCredentials and AlterUserScramCredentials over the gateway's users store.

Kafka's `kafka-configs --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users` and
AdminClient's user SCRAM calls manage the same users the SASL listeners check and the
`pulsar-gateway users` command manages (docs/security.md, 'Users'). The client sends a salt
and a SaltedPassword; the store keeps only the StoredKey and ServerKey derived from them.
Kafka's rules and errors: mechanisms 1 (SCRAM-SHA-256) and 2 (SCRAM-SHA-512) only, 4096 to
16384 iterations, one change per user and mechanism per request, a deletion of a credential
that does not exist is RESOURCE_NOT_FOUND. A user whose SCRAM-SHA-256 keys are gone cannot
log in with PLAIN any more (PLAIN is checked against those keys). Rights: `describe` on
the cluster to list, `alter` on it to change (docs/security.md, 'Authorization').
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from pulsar_gateway.handlers.kafka.authorization import cluster_allowed
from pulsar_gateway.handlers.kafka.context import KafkaContext
from pulsar_gateway.handlers.kafka.port import ScramCredentials, StorageError
from pulsar_gateway.kafka_codec.errors import ErrorCode
from pulsar_gateway.security.credentials import SCRAM_MECHANISMS, mechanism_entry, shown
from pulsar_gateway.security.rights import ALTER, DESCRIBE

log = logging.getLogger("gateway.kafka.admin")

# Kafka's ScramMechanism type numbers
MECHANISM_NAMES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NUMBERS = {name: number for number, name in MECHANISM_NAMES.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class CredentialRefused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _store(context: KafkaContext) -> ScramCredentials:
    store = context.storage.credentials
    if store is None:
        raise CredentialRefused(ErrorCode.UNSUPPORTED_VERSION, "this gateway has no users store")
    return store


async def describe(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "results": [],
    }
    try:
        if not cluster_allowed(context, DESCRIBE):
            raise CredentialRefused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        store = _store(context)
    except CredentialRefused as refused:
        return {**answer, "error_code": refused.code, "error_message": refused.message}
    asked = [item["name"] for item in request.get("users") or []]
    repeated = {name for name, times in Counter(asked).items() if times > 1}
    for name in asked or store.names():
        result: dict[str, Any] = {
            "user": name,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "credential_infos": [],
        }
        record = store.lookup(name)
        infos = [
            {"mechanism": MECHANISM_NUMBERS[m], "iterations": int(record[m]["iterations"])}
            for m in SCRAM_MECHANISMS
            if record is not None and m in record
        ]
        if name in repeated:
            result.update(
                error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"Cannot describe SCRAM credentials for the same user twice "
                f"in a single request: {shown(name)}",
            )
        elif not infos:
            result.update(
                error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: "
                f"{shown(name)}",
            )
        else:
            result["credential_infos"] = infos
        if asked or infos:
            answer["results"].append(result)
    return answer


async def alter(context: KafkaContext, header: Any, request: dict[str, Any]) -> dict[str, Any]:
    deletions, upsertions = request["deletions"], request["upsertions"]
    changes = [(item["name"], item["mechanism"]) for item in deletions + upsertions]
    repeated = {key for key, times in Counter(changes).items() if times > 1}
    users = list(dict.fromkeys(name for name, _ in changes))
    errors: dict[str, CredentialRefused] = {}
    for name, mechanism in changes:
        if (name, mechanism) in repeated and name not in errors:
            errors[name] = CredentialRefused(
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    try:
        if not cluster_allowed(context, ALTER):
            raise CredentialRefused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        store: ScramCredentials | None = _store(context)
    except CredentialRefused as refused:
        errors = {name: refused for name in users}
        store = None
    for item in upsertions:
        if item["name"] not in errors:
            problem = _upsertion_problem(item)
            if problem is not None:
                errors[item["name"]] = problem
    for item in deletions:
        if item["name"] not in errors and item["mechanism"] not in MECHANISM_NAMES:
            errors[item["name"]] = CredentialRefused(
                ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
            )
    if store is not None:
        for item in deletions:
            await _apply(errors, item["name"], store.remove_credential, item)
        for item in upsertions:
            await _apply(errors, item["name"], store.set_credential, item)
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "user": name,
                "error_code": errors[name].code if name in errors else ErrorCode.NONE,
                "error_message": errors[name].message if name in errors else None,
            }
            for name in users
        ],
    }


def _upsertion_problem(item: dict[str, Any]) -> CredentialRefused | None:
    if not item["name"]:
        return CredentialRefused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if item["mechanism"] not in MECHANISM_NAMES:
        return CredentialRefused(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if item["iterations"] < MIN_ITERATIONS:
        return CredentialRefused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if item["iterations"] > MAX_ITERATIONS:
        return CredentialRefused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not item["salt"] or not item["salted_password"]:
        return CredentialRefused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and password are empty")
    return None


async def _apply(
    errors: dict[str, CredentialRefused], name: str, change: Any, item: dict[str, Any]
) -> None:
    """One deletion (change=remove_credential) or upsertion (set_credential) of a user
    that has no error yet; the first failure is the user's result."""
    if name in errors:
        return
    mechanism = MECHANISM_NAMES[item["mechanism"]]
    try:
        if "salted_password" in item:
            keys = mechanism_entry(
                mechanism, bytes(item["salt"]), bytes(item["salted_password"]), item["iterations"]
            )
            await change(name, mechanism, keys)
            log.info("SCRAM credential %s of user %s set over Kafka", mechanism, shown(name))
        elif not await change(name, mechanism):
            errors[name] = CredentialRefused(
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            log.info("SCRAM credential %s of user %s deleted over Kafka", mechanism, shown(name))
    except ValueError as exc:  # a name the SASL messages could not carry
        errors[name] = CredentialRefused(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
    except StorageError as exc:
        errors[name] = CredentialRefused(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
