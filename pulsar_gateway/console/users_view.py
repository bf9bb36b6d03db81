"""The users page: users and their rights, and an administrator's changes to them.

Everyone sees what it may: an administrator every user, a user itself. An administrator
(an `amqp.users` account or a superuser) may also add a user, set a password, remove a
user, and grant or revoke rights, each confirmed in the page and logged with its user.
The changes are the ones `pulsar-gateway users` makes (tools/users_cli.py), through the
same public operations: the users store's `set_password`, `remove` and `set_rights`, and
the rights model's `grant`, `revoke` and `with_superuser` (security/rights.py). The store
writes them to the users topic, signed, and every gateway follows it, so a change applies
within a second or so. Users of the `amqp.users` table are shown, not changed (they live
in the configuration).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from pulsar_gateway.console.kafka_view import ConsoleError, Viewer
from pulsar_gateway.security import rights as model

Json = Any
MAX_USERS_SHOWN = 1000
MAX_PASSWORD_CHARS = 1024
SUPERUSER = "superuser"  # the page's name for the superuser flag, beside the resources
# what the grant dialog offers: a namespace's topics (the convenience), or one resource type
# by a name, `prefix*` or `*` (security/rights.py, `convenience_pattern`)
GRANTABLE = (model.NAMESPACE, model.TOPIC, model.GROUP, model.TRANSACTIONAL_ID, model.CLUSTER)


class Accounts(Protocol):
    """The users store as the console changes it (storage/users.py's UsersStore)."""

    def lookup(self, name: str) -> Mapping[str, Any] | None: ...

    def rights_of(self, user: str) -> model.Rights: ...

    async def set_password(self, name: str, password: str) -> None: ...

    async def remove(self, name: str) -> bool: ...

    async def set_rights(self, user: str, rights: model.Rights) -> None: ...


class UsersView:
    def __init__(
        self,
        user_names: Callable[[], Iterable[str]],
        rights_of: Callable[[str], model.Rights],
        table_users: Iterable[str],
        accounts: Accounts | None = None,
    ) -> None:
        """`rights_of`: the authorizer's view (what a user may do now); `accounts`: the
        users store to change, None where there is none (nothing is editable)."""
        self.user_names = user_names
        self.rights_of = rights_of
        self.table_users = sorted(table_users)
        self.accounts = accounts

    def listing(self, caller: Viewer) -> Json:
        """Users and their rights: an administrator sees everyone, a user itself only."""
        if caller.administrator:
            names = sorted(set(self.user_names()))[:MAX_USERS_SHOWN]
            table = self.table_users
        else:
            names = [caller.user] if caller.user not in self.table_users else []
            table = []
        rows = [
            {"user": n, "source": "users store", **model.to_record(self.rights_of(n))}
            for n in names
        ]
        rows += [{"user": n, "source": "amqp.users", "superuser": True, "acls": []} for n in table]
        return {
            "editable": bool(caller.administrator and self.accounts is not None),
            "resources": [*GRANTABLE, SUPERUSER],
            "operations": {r: list(model.USEFUL[r]) for r in GRANTABLE},
            "users": rows,
        }

    # --- changes (POST /console/api/actions) --------------------------------------------

    def actions(self) -> dict[str, Callable[[Viewer, dict[str, Any]], Awaitable[Json]]]:
        return {
            "create_user": self.create_user,
            "set_password": self.set_password,
            "remove_user": self.remove_user,
            "grant": self.grant,
            "revoke": self.revoke,
        }

    def _store(self, caller: Viewer, user: Any) -> tuple[Accounts, str]:
        if not caller.administrator:
            raise ConsoleError(403, "changing users and rights needs an administrator")
        if self.accounts is None:
            raise ConsoleError(409, "this gateway has no users store")
        if not isinstance(user, str) or not user or len(user) > 256:
            raise ConsoleError(400, "'user' is a name of 1 to 256 characters")
        if user in self.table_users:
            raise ConsoleError(409, f"'{user}' is an amqp.users account: change it in the config")
        return self.accounts, user

    async def _set_password(self, accounts: Accounts, user: str, password: Any) -> None:
        if not isinstance(password, str) or not password or len(password) > MAX_PASSWORD_CHARS:
            raise ConsoleError(400, f"'password' is 1 to {MAX_PASSWORD_CHARS} characters")
        try:
            await accounts.set_password(user, password)
        except ValueError as exc:  # the name's or the password's rules
            raise ConsoleError(400, str(exc)) from exc

    async def create_user(self, caller: Viewer, request: dict[str, Any]) -> Json:
        accounts, user = self._store(caller, request.get("user"))
        if accounts.lookup(user) is not None:
            raise ConsoleError(409, f"user '{user}' exists: set its password instead")
        await self._set_password(accounts, user, request.get("password"))
        return {"created": user}

    async def set_password(self, caller: Viewer, request: dict[str, Any]) -> Json:
        accounts, user = self._store(caller, request.get("user"))
        if accounts.lookup(user) is None:
            raise ConsoleError(404, f"no user '{user}'")
        await self._set_password(accounts, user, request.get("password"))
        return {"password_set": user}

    async def remove_user(self, caller: Viewer, request: dict[str, Any]) -> Json:
        accounts, user = self._store(caller, request.get("user"))
        if user == caller.user:
            raise ConsoleError(409, "you may not remove yourself")
        if not await accounts.remove(user):
            raise ConsoleError(404, f"no user '{user}'")
        if not accounts.rights_of(user).empty:  # a user added again starts with none
            await accounts.set_rights(user, model.Rights())
        return {"removed": user}

    async def grant(self, caller: Viewer, request: dict[str, Any]) -> Json:
        return await self._change(caller, request, granting=True)

    async def revoke(self, caller: Viewer, request: dict[str, Any]) -> Json:
        return await self._change(caller, request, granting=False)

    async def _change(self, caller: Viewer, request: dict[str, Any], granting: bool) -> Json:
        """As `pulsar-gateway users grant|revoke` (tools/users_cli.py's change_rights)."""
        accounts, user = self._store(caller, request.get("user"))
        resource, pattern = request.get("resource"), request.get("pattern", "")
        operations = request.get("operations", [])
        if not isinstance(pattern, str) or not isinstance(operations, list):
            raise ConsoleError(400, "'pattern' is a string, 'operations' a list of names")
        if not all(isinstance(op, str) for op in operations):
            raise ConsoleError(400, "'operations' is a list of names")
        current = accounts.rights_of(user)
        try:
            rule = request.get("rule")
            if not granting and isinstance(rule, dict):  # one rule as listed: taken away
                changed = model.without_rules(current, [_rule_of(rule)])
            elif resource == SUPERUSER:
                if granting is False and user == caller.user:
                    raise ConsoleError(409, "you may not take your own superuser flag")
                changed = model.with_superuser(current, granting)
            elif resource not in GRANTABLE:
                raise model.RightsError(f"'resource' is one of {', '.join(GRANTABLE)}")
            elif granting:
                changed = model.grant(current, str(resource), pattern, operations)
            else:
                changed = model.revoke(current, str(resource), pattern, operations or ["all"])
        except model.RightsError as exc:
            raise ConsoleError(400, str(exc)) from exc
        await accounts.set_rights(user, changed)
        return {"user": user, **model.to_record(changed)}


def _rule_of(fields: dict[str, Any]) -> model.Rule:
    """A rule as the listing shows it (`to_record`'s fields), validated."""
    resource, pattern, name, operation = (
        fields.get(key) for key in ("resource", "pattern", "name", "operation")
    )
    permission, host = fields.get("permission", model.ALLOW), fields.get("host", model.ANY_HOST)
    if not (
        isinstance(resource, str)
        and isinstance(pattern, str)
        and isinstance(name, str)
        and isinstance(operation, str)
        and isinstance(permission, str)
        and isinstance(host, str)
    ):
        raise model.RightsError("a rule is resource, pattern, name, operation, permission, host")
    return model.make_rule(resource, pattern, name, operation, permission, host)
