"""The commands that run beside a gateway: migrate, parity, amqp import-definitions, users,
cluster status, topics pending-deletion."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from rich.console import Console

from pulsar_gateway.tools.gateway_link import GatewayLink, GatewayUnreachable, discover


def _link(args: argparse.Namespace) -> GatewayLink:
    if args.pulsar_url:
        return GatewayLink(args.pulsar_url, args.metadata_namespace)
    return discover(args.gateway_health)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def run_tool(args: argparse.Namespace) -> int:
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    console = Console(stderr=True)
    try:
        if args.command == "migrate":
            return _migrate(args, console)
        if args.command == "parity":
            return _parity(args, console)
        if args.command == "amqp" and args.amqp_command == "import-definitions":
            return _import_definitions(args, console)
        if args.command == "users" and args.users_command:
            from pulsar_gateway.tools.users_cli import run_users

            link = None if args.data_dir else _link(args)
            return asyncio.run(run_users(args, link))
        if args.command == "topics" and args.topics_command == "pending-deletion":
            from pulsar_gateway.tools.topics_cli import run_topics

            return asyncio.run(run_topics(args, _link(args)))
        if args.command == "cluster" and args.cluster_command == "status":
            from pulsar_gateway.tools.cluster_status import run_status

            return run_status(args, console)
    except GatewayUnreachable as exc:
        console.print(f"[red]pulsar-gateway {args.command}:[/] {exc}")
        return 2
    if args.command == "users":
        actions = "add, passwd, remove, list, grant, revoke, rights"
        print(f"pulsar-gateway users: give an action ({actions})", file=sys.stderr)
        return 2
    if args.command == "topics":
        print("pulsar-gateway topics: give a tool (pending-deletion)", file=sys.stderr)
        return 2
    if args.command == "cluster":
        print("pulsar-gateway cluster: give a tool (status)", file=sys.stderr)
        return 2
    print("pulsar-gateway amqp: give a tool (import-definitions)", file=sys.stderr)
    return 2


def _migrate(args: argparse.Namespace, console: Console) -> int:
    from pulsar_gateway.tools.migration.errors import MigrationError
    from pulsar_gateway.tools.migration.runner import MigrationPlan, migrate, print_summary

    plan = MigrationPlan(
        source=args.source,
        target=args.target,
        link=_link(args),
        name=args.name or args.source,
        topics=_names(args.topics),
        topic_pattern=args.topic_regex,
        group_pattern=None if args.no_groups else args.group_regex,
        parallel=max(1, args.parallel),
        entry_format=args.entry_format,
        max_records_per_second=args.max_records_per_second,
    )
    try:
        summary = asyncio.run(migrate(plan, console))
    except MigrationError as exc:
        console.print(f"[red]migrate:[/] {exc}")
        return 1
    print_summary(summary, console)
    return 1 if summary.failed else 0


def _parity(args: argparse.Namespace, console: Console) -> int:
    from pulsar_gateway.tools.parity.job import ParityPlan, run_parity

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            console.print(f"[red]parity:[/] --conf {item!r}: expected KEY=VALUE")
            return 2
        conf[key] = value
    plan = ParityPlan(
        source=args.source,
        target=args.target,
        link=_link(args),
        name=args.name or args.source,
        topics=_names(args.topics),
        topic_pattern=args.topic_regex,
        group_pattern=args.group_regex,
        target_via=args.target_via,
        pulsar_client=args.pulsar_client,
        master=args.master,
        spark_conf=conf,
        report=args.report,
    )
    verdict = run_parity(plan, console)
    return 0 if verdict.passed else 1


def _import_definitions(args: argparse.Namespace, console: Console) -> int:
    from pulsar_gateway.tools.amqp_definitions import DefinitionsError, import_definitions

    try:
        done = asyncio.run(import_definitions(args.file, args.url, console))
    except DefinitionsError as exc:
        console.print(f"[red]import-definitions: nothing imported[/]\n{exc}")
        return 1
    print(done)
    return 0
