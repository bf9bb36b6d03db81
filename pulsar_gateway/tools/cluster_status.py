"""`pulsar-gateway cluster status`: a running member's view of the cluster, as tables.

It reads one member's `/cluster` (docs/cluster.md, "Operations"), logged in with `--user`
(the view names every partition and group: it asks for an administrator or a user with
`describe` on the cluster): the live members with
their addresses and lease ages, and how many partitions, groups and vhosts each owns.
Every member computes ownership from the same live set, so any member's answer will do;
two members disagreeing is itself worth reporting.
"""

from __future__ import annotations

import argparse
import base64
import json
import urllib.error
import urllib.request
from typing import Any

from rich.console import Console
from rich.table import Table

KINDS = ("partitions", "groups", "vhosts")


def add_parser(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="the gateway cluster")
    tools = cluster.add_subparsers(dest="cluster_command", metavar="TOOL")
    status = tools.add_parser(
        "status",
        help="members, lease ages and who owns what, as one member sees it",
        description="Print a running gateway's view of its cluster: every live member "
        "(member id, Kafka node id, addresses, lease age) and how many partitions, groups "
        "and vhosts each owns.",
    )
    status.add_argument(
        "--gateway-health",
        default="http://127.0.0.1:9404",
        help="a member's metrics URL (default http://127.0.0.1:9404)",
    )
    status.add_argument(
        "--user",
        help="log in as this user (an administrator, or with describe on the cluster); its "
        "password from a prompt or the first line of stdin",
    )
    status.add_argument("--json", action="store_true", help="print the raw JSON instead")


def fetch(
    url: str, credentials: tuple[str, str] | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """The member's `/cluster` answer (which asks for a login: docs/security.md);
    OSError/ValueError when there is none."""
    base = url.rstrip("/")
    if base.endswith("/health"):
        base = base[: -len("/health")]
    request = urllib.request.Request(base + "/cluster")
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if not isinstance(answer, dict):
        raise ValueError("not a cluster view")
    return answer


def _age(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}s"


def render(view: dict[str, Any], console: Console) -> None:
    serving = "[green]serving[/]" if view.get("serving") else "[red]not serving[/]"
    # escaped: rich reads "[cluster]" as markup and printed "(no )"
    mode = "cluster" if view.get("enabled") else "single gateway (no \\[cluster])"
    console.print(
        f"[bold]{view.get('me', '?')}[/] ({mode}), epoch {view.get('epoch', '?')}, {serving}, "
        f"lease {view.get('lease_seconds', '-')}s, heartbeat {view.get('heartbeat_seconds', '-')}s"
    )
    owned = view.get("owned_by_member") or {}
    members = Table(title="members")
    for column in ("member", "node id", "kafka", "amqp (members)", "http", "epoch", "lease age"):
        members.add_column(column)
    for kind in KINDS:
        members.add_column(kind, justify="right")
    for member in view.get("members") or []:
        name = str(member.get("member_id", "?"))
        members.add_row(
            f"[bold]{name}[/] (me)" if member.get("me") else name,
            str(member.get("node_id", "")),
            str(member.get("kafka", "")),
            str(member.get("amqp", "")),
            str(member.get("http_port", "")),
            str(member.get("epoch", "")),
            _age(member.get("lease_age_seconds")),
            *(str((owned.get(kind) or {}).get(name, 0)) for kind in KINDS),
        )
    console.print(members)


def run_status(args: argparse.Namespace, console: Console) -> int:
    credentials = None
    if args.user:
        from pulsar_gateway.tools.users_cli import read_password

        credentials = (args.user, read_password(f"{args.user}'s password: ", twice=False))
    try:
        view = fetch(args.gateway_health, credentials)
    except urllib.error.HTTPError as exc:
        why = "log in with --user" if exc.code == 401 and not args.user else exc.reason
        console.print(f"[red]pulsar-gateway cluster status:[/] {exc.code}: {why}")
        return 2
    except (OSError, ValueError) as exc:
        where = args.gateway_health
        console.print(f"[red]pulsar-gateway cluster status:[/] no answer at {where}: {exc}")
        return 2
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    render(view, Console())
    return 0
