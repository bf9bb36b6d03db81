"""`POST /api/definitions[/{vhost}]`: a RabbitMQ definitions import through the
management API, as `rabbitmqadmin import` and the management UI send it.

The upload is checked and declared exactly as `pulsar-gateway amqp import-definitions`
does it (tools/amqp_definitions.py: all or nothing, every problem listed), over an AMQP
connection to this gateway's own listener made with the caller's Basic credentials. So
the import is authorized by the same rules as any AMQP client's declares, and in a
cluster each vhost's declares reach the vhost's owner the way every connection does.

The caller has logged in on the management port before this runs (handlers/http_login.py),
from its own address: that connection comes from the gateway's loopback, where the AMQP
listener would let `guest` in whoever sent the upload. The composition root wires this to
the metrics server; the handlers never see it.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

import aiormq
from rich.console import Console

from pulsar_gateway.security.logins import basic_credentials
from pulsar_gateway.tools.amqp_definitions import DefinitionsError, import_plan, load_upload

log = logging.getLogger("gateway.definitions_upload")

Answer = tuple[int, object]
_REFUSED: Answer = (401, {"error": "not_authorized", "reason": "Login failed"})


class DefinitionsUpload:
    """Answers a POST of a definitions file; one import runs at a time."""

    def __init__(self, amqp_host: str, amqp_port: int) -> None:
        # the listener's own address; a wildcard bind is reached on loopback
        self.host = "127.0.0.1" if amqp_host in ("", "0.0.0.0") else amqp_host  # noqa: S104
        self.host = "::1" if self.host == "::" else self.host
        self.port = amqp_port
        self._one_at_a_time = asyncio.Lock()

    async def __call__(
        self, path: str, caller: object, authorization: str | None, body: bytes
    ) -> Answer:
        """`caller` logged in with `authorization` (the metrics server checked it)."""
        parts = [urllib.parse.unquote(p) for p in urllib.parse.urlsplit(path).path.split("/")]
        parts = [p for p in parts[1:] if p != ""] if path.endswith("/") else parts[1:]
        if parts[:2] != ["api", "definitions"] or len(parts) > 3:
            return 405, {"error": "Method Not Allowed", "reason": "only definitions are uploaded"}
        credentials = basic_credentials(authorization)
        if caller is None or credentials is None:
            return _REFUSED
        try:
            plan = load_upload(body, parts[2] if len(parts) == 3 else None)
        except DefinitionsError as exc:
            return 400, {"error": "bad_request", "reason": "\n".join(exc.problems)}
        user, password = credentials
        url = f"amqp://{_quote(user)}:{_quote(password)}@{_netloc(self.host, self.port)}/"
        async with self._one_at_a_time:
            if not await self._logs_in(url, next(iter(plan.vhosts), "/")):
                return _REFUSED
            try:
                done = await import_plan(plan, url, Console(quiet=True))
            except DefinitionsError as exc:
                log.warning("definitions upload by %r refused: %s", user, "; ".join(exc.problems))
                return 400, {"error": "bad_request", "reason": "\n".join(exc.problems)}
        log.info("definitions uploaded by %r: %s", user, done)
        return 204, None

    async def _logs_in(self, url: str, vhost: str) -> bool:
        """Whether the caller's credentials open a connection (to the first vhost the
        upload names): RabbitMQ answers 401 to a bad login, not 400."""
        target = url[:-1] + "/" + urllib.parse.quote(vhost, safe="")
        try:
            connection = await aiormq.connect(target)
        except aiormq.exceptions.ProbableAuthenticationError:
            return False
        except (aiormq.exceptions.AMQPError, OSError):
            return True  # not the login: the import itself will say what is wrong
        await connection.close()
        return True


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
