"""`pulsar-gateway users add|remove|list|passwd|grant|revoke|rights`: manage the users store
of a running gateway: its users, and what each may do (docs/security.md, "Authorization").

The command finds the gateway's Pulsar through its `/health` answer and the link file in
its data directory (as migrate does: tools/gateway_link.py) or `--pulsar-url`, and writes
to the users topic directly, each record signed with the users key the gateway names
(storage/users.py: a record without it is refused), so it works for the gateway's own
account, which can read the 0700 data directory; every gateway follows that topic, so a
change applies within a second or so, without a restart. With `--data-dir` it works
on a stopped gateway's embedded broker instead: it starts the broker on that directory for
the change, and refuses while a broker already runs on it (two brokers on one database
would each miss the other's writes).

Rights are Kafka's ACL rules (security/rights.py): `grant NAME --topic PATTERN
--operations read,write` (or `--namespace tenant/ns`, the rules PREFIXED `tenant/ns/`;
`--group PATTERN`, `--transactional-id PATTERN`, `--cluster`, `--superuser`), with
`--deny` for DENY rules and `--host IP` for rules of one address; a pattern is a name,
`prefix*` (PREFIXED) or `*`. `revoke` the same way (without `--operations`: every rule of
the pattern), `rights [NAME]` shows them; NAME `*` holds the rules of every user (Kafka's
`User:*`). The rules are merged into the user's record, which every gateway follows like
the users; they apply to open connections at their next request.

A password is read from a prompt (asked twice) or, when stdin is not a terminal, from its
first line: never from a flag, where it would sit in the shell history and in `ps`.

Toward an external Pulsar that wants TLS or credentials, the command takes the gateway's
own `[pulsar]` settings (config file and environment, as `run` reads them) when they are
for the same service URL (docs/security.md, "Toward Pulsar").
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulsar_gateway.gateway.backend.connection_security import NO_SECURITY, PulsarSecurity
from pulsar_gateway.gateway.backend.embedded import brokers_on
from pulsar_gateway.gateway.config import load_settings
from pulsar_gateway.security import rights as model
from pulsar_gateway.security.record_signing import load_or_create_key
from pulsar_gateway.tools.gateway_link import GatewayLink


def add_parser(commands: Any, add_gateway_link: Callable[[argparse.ArgumentParser], None]) -> None:
    users = commands.add_parser(
        "users",
        help="manage the users of Kafka SASL and AMQP (docs/security.md)",
        description="Add, remove, list users or change a password, on a running gateway's "
        "Pulsar. Passwords are read from a prompt or stdin, and stored as SCRAM-SHA-256 and "
        "SCRAM-SHA-512 salted keys only.",
    )
    actions = users.add_subparsers(dest="users_command", metavar="ACTION")
    for action, text in (
        ("add", "add a user (its password from a prompt or stdin)"),
        ("passwd", "change a user's password (from a prompt or stdin)"),
        ("remove", "remove a user"),
        ("list", "list user names"),
        ("grant", "give a user operations on a namespace, group or the cluster"),
        ("revoke", "take operations back (all of them without --operations)"),
        ("rights", "show a user's rights (every user's without a name)"),
    ):
        sub = actions.add_parser(action, help=text)
        if action == "rights":
            sub.add_argument("name", nargs="?", help="the user name")
        elif action != "list":
            sub.add_argument("name", help="the user name")
        if action in ("grant", "revoke"):
            _add_grant_arguments(sub)
        add_gateway_link(sub)
        sub.add_argument(
            "--data-dir",
            type=Path,
            help="a stopped gateway's gateway.data_dir: change its embedded broker's users "
            "(instead of a running gateway's)",
        )


def _add_grant_arguments(sub: argparse.ArgumentParser) -> None:
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--namespace",
        metavar="PATTERN",
        help="a Pulsar namespace: 'tenant/ns', 'tenant/*' or '*' (Kafka topics in it, or the "
        "AMQP vhost mapped onto it)",
    )
    target.add_argument(
        "--topic",
        metavar="PATTERN",
        help="Kafka topics (and AMQP queues and exchanges, as topics of their vhost's "
        "namespace): a name, 'prefix*' or '*'",
    )
    target.add_argument(
        "--group", metavar="PATTERN", help="Kafka consumer groups: a name, 'prefix*' or '*'"
    )
    target.add_argument(
        "--transactional-id",
        metavar="PATTERN",
        help="Kafka transactional ids: a name, 'prefix*' or '*' (write: use the id, describe)",
    )
    target.add_argument("--cluster", action="store_true", help="the gateway as a whole")
    target.add_argument("--superuser", action="store_true", help="every operation on everything")
    sub.add_argument(
        "--operations",
        "-o",
        metavar="OPS",
        help="comma separated, Kafka's: read, write, describe, create, delete, alter, "
        "describe_configs, alter_configs, cluster_action and idempotent_write (cluster), "
        "admin (create+delete+alter), all",
    )
    sub.add_argument("--deny", action="store_true", help="DENY rules (they win over ALLOW)")
    sub.add_argument(
        "--host", default=model.ANY_HOST, help="the IP address the rule is for ('*': any)"
    )


def change_rights(args: argparse.Namespace, current: model.Rights) -> model.Rights:
    """The user's rights after `grant` or `revoke` (RightsError: refused, with the rule)."""
    granting = args.users_command == "grant"
    if args.superuser:
        if args.operations:
            raise model.RightsError("--superuser takes no --operations")
        return model.with_superuser(current, granting)
    if args.namespace is not None:
        resource, pattern = model.NAMESPACE, args.namespace
    elif args.topic is not None:
        resource, pattern = model.TOPIC, args.topic
    elif args.group is not None:
        resource, pattern = model.GROUP, args.group
    elif args.transactional_id is not None:
        resource, pattern = model.TRANSACTIONAL_ID, args.transactional_id
    else:
        resource, pattern = model.CLUSTER, ""
    words = (args.operations or "").split(",")
    words = [word for word in words if word.strip()]
    permission = model.DENY if args.deny else model.ALLOW
    if granting:
        if not words:
            raise model.RightsError("grant needs --operations")
        return model.grant(current, resource, pattern, words, permission, args.host)
    return model.revoke(current, resource, pattern, words or ["all"], permission, args.host)


def describe_rights(name: str, rights: model.Rights) -> list[str]:
    """Lines for `users rights`: one per pattern, permission and host with its operations
    (`alice  allow topic prefixed team-a/: read,write`), `superuser` first when set."""
    lines = [f"{name}  superuser"] if rights.superuser else []
    operations: dict[tuple[str, str, str, str, str], list[str]] = {}
    for rule in rights.rules:
        key = (rule.permission, rule.resource, rule.pattern, rule.name, rule.host)
        operations.setdefault(key, []).append(rule.operation)
    for (permission, resource, pattern, literal, host), ops in operations.items():
        what = resource if resource == model.CLUSTER else f"{resource} {pattern} {literal}"
        source = "" if host == model.ANY_HOST else f" from {host}"
        lines.append(f"{name}  {permission} {what}{source}: {','.join(sorted(ops))}")
    return lines


def read_password(prompt: str = "password: ", twice: bool = True) -> str:
    """From a terminal (`twice` for a new one); else the first line of stdin (its newline
    dropped)."""
    if sys.stdin.isatty():
        first = getpass.getpass(prompt)
        if twice and getpass.getpass("again: ") != first:
            raise ValueError("the passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def broker_running_on(db_path: Path) -> bool:
    """Whether a gateway's embedded broker runs on this database (Linux: from /proc)."""
    return bool(brokers_on(db_path))


async def run_users(args: argparse.Namespace, link: GatewayLink | None) -> int:
    """The exit status: 0 done, 1 refused (unknown user, user exists, empty password,
    a gateway running on --data-dir)."""
    from pulsar_gateway.gateway.backend.embedded import DB_NAME, EmbeddedBroker
    from pulsar_gateway.gateway.data_dir_lock import DataDirBusy

    action = args.users_command
    password = ""
    if action in ("add", "passwd"):
        password = read_password()
        if not password:
            print("users: empty password refused", file=sys.stderr)
            return 1
    if link is not None:
        return await _change(args, link, password)
    broker_dir = args.data_dir / "pulsar"
    if broker_running_on(broker_dir / DB_NAME):
        print(
            f"users: a broker runs on {args.data_dir}; use --gateway-health instead",
            file=sys.stderr,
        )
        return 1
    if not broker_dir.is_dir():
        print(f"users: no embedded broker data in {args.data_dir}", file=sys.stderr)
        return 1
    broker = EmbeddedBroker(broker_dir)
    try:
        await broker.start()
    except DataDirBusy as exc:
        print(f"users: {exc}; use --gateway-health instead", file=sys.stderr)
        return 1
    try:
        # the stopped gateway's key, in the broker's directory (made here if it has none)
        key_file = str((broker_dir / "users.key").absolute())
        link = GatewayLink(broker.service_url, args.metadata_namespace, users_key_file=key_file)
        return await _change(args, link, password)
    finally:
        await broker.stop()


def _users_key(link: GatewayLink) -> tuple[bytes | None, bool]:
    """The users store's signing key for `link` and whether this call made it: the file
    the gateway named, or for `--pulsar-url` the configured `gateway.users_key_file` when
    the settings are for that service URL; (None, False) when records are not signed."""
    path = Path(link.users_key_file) if link.users_key_file else None
    if path is None:
        settings = load_settings()
        if settings.pulsar.service_url and settings.pulsar.service_url == link.service_url:
            path = settings.users_key_path
    if path is None:
        return None, False
    try:
        return load_or_create_key(path)
    except PermissionError:
        raise UsersKeyError(
            f"the users key {path} is readable by the gateway's account only: run this as "
            "that account"
        ) from None
    except (OSError, ValueError) as exc:
        raise UsersKeyError(f"the users key {path}: {exc}") from None


class UsersKeyError(Exception):
    """The users store's key cannot be had; the message says why."""


def _security_for(service_url: str) -> PulsarSecurity:
    """The `[pulsar]` TLS and authentication settings when they are for `service_url`;
    none for another cluster or an embedded broker."""
    settings = load_settings().pulsar
    if settings.service_url != service_url:
        return NO_SECURITY
    return PulsarSecurity.from_settings(settings)


async def _change(args: argparse.Namespace, link: GatewayLink, password: str) -> int:
    from pulsar_gateway.gateway.backend.pulsar_backend import PulsarBackend
    from pulsar_gateway.storage.users import UsersStore

    action = args.users_command
    try:
        key, made = _users_key(link)
    except UsersKeyError as exc:
        print(f"users: {exc}", file=sys.stderr)
        return 1
    backend = PulsarBackend(
        link.service_url, operation_timeout_seconds=10, security=_security_for(link.service_url)
    )
    await backend.start()
    # signed like the gateway's own writes: a record without the key's signature is refused
    store = UsersStore(backend, link.metadata_namespace, key)
    try:
        await store.load(follow=False, adopt=made)
        if action == "list":
            for name in store.names():
                print(name)
            return 0
        if action in ("grant", "revoke", "rights"):
            return await _rights(args, store)
        known = store.lookup(args.name) is not None
        if action == "add" and known:
            print(f"users: '{args.name}' exists (use passwd)", file=sys.stderr)
            return 1
        if action in ("passwd", "remove") and not known:
            print(f"users: no user '{args.name}'", file=sys.stderr)
            return 1
        if action == "remove":
            await store.remove(args.name)
            print(f"removed {args.name}")
        else:
            try:
                await store.set_password(args.name, password)
            except ValueError as exc:  # a name the store refuses (`*`, a `,`...)
                print(f"users: {exc}", file=sys.stderr)
                return 1
            print(f"{'added' if action == 'add' else 'changed password of'} {args.name}")
        return 0
    finally:
        await store.close()
        await backend.close()


async def _rights(args: argparse.Namespace, store: Any) -> int:
    """`grant`, `revoke`, `rights` on a loaded users store."""
    if args.users_command == "rights":
        names = [args.name] if args.name else sorted(store.all_rights())
        for name in names:
            for line in describe_rights(name, store.rights_of(name)):
                print(line)
        return 0
    try:
        rights = change_rights(args, store.rights_of(args.name))
    except model.RightsError as exc:
        print(f"users: {exc}", file=sys.stderr)
        return 1
    await store.set_rights(args.name, rights)
    if store.lookup(args.name) is None and args.name != model.EVERYONE:
        print(
            f"users: note: '{args.name}' is not a user of the store (yet); its rights apply "
            "once it is",
            file=sys.stderr,
        )
    for line in describe_rights(args.name, rights) or [f"{args.name}  (no rights)"]:
        print(line)
    return 0
