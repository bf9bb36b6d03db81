"""`pulsar-gateway`: run the gateway; migrate a Kafka cluster into it; check parity;
import RabbitMQ definitions."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from pulsar_gateway.gateway.config import DEFAULT_METADATA_NAMESPACE, ConfigError, load_settings
from pulsar_gateway.gateway.full_collections import collect_fully_less_often
from pulsar_gateway.gateway.thread_switching import share_the_interpreter
from pulsar_gateway.gateway.timer_slack import tighten_timer_slack

EPILOG = """\
examples:
  pulsar-gateway run                      embedded Pulsar broker, Kafka on 127.0.0.1:9092
  pulsar-gateway run --kafka-port 19092   another port
  pulsar-gateway run --pulsar-url pulsar://pulsar:6650 --admin-url http://pulsar:8080
  pulsar-gateway run --set kafka.default_partitions=3 --set gateway.log_level=debug
  pulsar-gateway run --workers auto       one worker per core, Kafka on 9092, 9093, ...

settings come from conf/gateway.toml (or --config FILE, or $PULSAR_GATEWAY_CONFIG), then
environment variables PULSAR_GATEWAY_<SECTION>__<KEY> (PULSAR_GATEWAY_KAFKA__PORT=9093),
then flags. Every setting is listed with its default in conf/gateway.toml.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsar-gateway",
        description="Kafka and AMQP 0-9-1 applications on Apache Pulsar, unchanged.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="start the gateway (embedded Pulsar unless --pulsar-url is given)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--config", type=Path, help="settings file (default conf/gateway.toml)")
    run.add_argument("--kafka-host", dest="kafka.host", help="Kafka listener address")
    run.add_argument("--kafka-port", dest="kafka.port", help="Kafka listener port (9092)")
    run.add_argument("--amqp-port", dest="amqp.port", help="AMQP listener port (5672)")
    run.add_argument("--pulsar-url", dest="pulsar.service_url", help="pulsar:// URL of a cluster")
    run.add_argument("--admin-url", dest="pulsar.admin_url", help="http:// admin URL of a cluster")
    run.add_argument(
        "--pulsar-client",
        dest="pulsar.client",
        help="how the gateway reaches Pulsar: native (its own client, default) or pulsar-client",
    )
    run.add_argument(
        "--data-dir", dest="gateway.data_dir", help="where the embedded broker keeps data"
    )
    run.add_argument("--metrics-port", dest="metrics.port", help="/metrics and /health port (9404)")
    run.add_argument("--log-level", dest="gateway.log_level", help="debug, info, warning, error")
    run.add_argument(
        "--workers",
        dest="gateway.workers",
        help="worker processes: 1 (default), N or auto (one per core); more than one starts "
        "a supervisor and a cluster of workers on ports kafka.port, kafka.port+1, ...",
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="any setting, repeatable",
    )
    _add_migrate(commands)
    _add_parity(commands)
    _add_amqp(commands)
    from pulsar_gateway.tools.users_cli import add_parser as add_users

    add_users(commands, _add_gateway_link)
    from pulsar_gateway.tools.cluster_status import add_parser as add_cluster

    add_cluster(commands)
    from pulsar_gateway.tools.topics_cli import add_parser as add_topics

    add_topics(commands, _add_gateway_link)
    return parser


def _add_gateway_link(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gateway-health",
        default="http://127.0.0.1:9404",
        help="the gateway's metrics/health URL, where it says where its Pulsar is "
        "(default http://127.0.0.1:9404)",
    )
    parser.add_argument(
        "--pulsar-url", help="the gateway's Pulsar service URL (instead of asking the gateway)"
    )
    parser.add_argument(
        "--metadata-namespace",
        default=DEFAULT_METADATA_NAMESPACE,
        help="with --pulsar-url: the gateway's metadata namespace",
    )


def _add_migrate(commands: Any) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="copy topics and consumer-group offsets from a Kafka cluster into the gateway",
        description="Copy topics (partition, key, value, headers, timestamp) and committed "
        "group offsets from a running Kafka cluster into a running gateway. Resumable: run "
        "it again after an interruption.",
    )
    migrate.add_argument("--source", required=True, help="bootstrap servers of the old cluster")
    migrate.add_argument(
        "--target", default="127.0.0.1:9092", help="the gateway's Kafka listener (127.0.0.1:9092)"
    )
    migrate.add_argument("--topics", default="", help="comma-separated topic names")
    migrate.add_argument("--topic-regex", help="also every topic whose name matches this")
    migrate.add_argument(
        "--group-regex", default=".*", help="consumer groups whose offsets to translate (all)"
    )
    migrate.add_argument("--no-groups", action="store_true", help="copy no group offsets")
    migrate.add_argument(
        "--name", help="name of the translation table (default: the source bootstrap servers)"
    )
    migrate.add_argument("--parallel", type=int, default=4, help="partitions copied at once (4)")
    migrate.add_argument(
        "--max-records-per-second",
        type=_records_per_second,
        default=0.0,
        help="copy at most this many records a second over all partitions, to spare a "
        "cluster still in use (0, the default: as fast as both sides go)",
    )
    migrate.add_argument(
        "--entry-format",
        choices=["pulsar", "kafka"],
        help="entry format of the topics migrate creates (default: the gateway's); kafka "
        "is a Pulsar message per record batch: fastest, for topics only Kafka clients read",
    )
    _add_gateway_link(migrate)


def _records_per_second(text: str) -> float:
    """--max-records-per-second: a number, 0 or more (argparse names the flag on error)."""
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not rate >= 0:  # (also NaN)
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return rate


def _add_parity(commands: Any) -> None:
    parity = commands.add_parser(
        "parity",
        help="check with Spark that the gateway holds exactly what the source cluster holds",
        description="A PySpark job comparing a source Kafka cluster with the gateway, per "
        "partition: counts, missing, extra, duplicates, per-key order, value and header "
        "mismatches, timestamp drift, group offset drift. Writes JSON and HTML; exits 0 "
        "only on parity.",
    )
    parity.add_argument("--source", required=True, help="bootstrap servers of the old cluster")
    parity.add_argument(
        "--target", default="127.0.0.1:9092", help="the gateway's Kafka listener (127.0.0.1:9092)"
    )
    parity.add_argument(
        "--target-via",
        choices=["pulsar", "kafka"],
        default="pulsar",
        help="read the target from its Pulsar topics (default) or through the gateway",
    )
    parity.add_argument(
        "--pulsar-client",
        choices=["native", "pulsar-client"],
        default="native",
        help="with --target-via pulsar: read through the gateway's own Pulsar protocol "
        "client (native, default: memory flat whatever the topic size) or pulsar-client",
    )
    parity.add_argument("--topics", default="", help="comma-separated topic names")
    parity.add_argument("--topic-regex", help="also every source topic whose name matches this")
    parity.add_argument("--group-regex", default=".*", help="groups whose offsets to check")
    parity.add_argument("--name", help="the migration's translation table (as given to migrate)")
    parity.add_argument("--master", default="local[*]", help="Spark master (local[*])")
    parity.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting"
    )
    parity.add_argument(
        "--report", default="reports/parity", help="report path without suffix (reports/parity)"
    )
    _add_gateway_link(parity)


def _add_amqp(commands: Any) -> None:
    amqp = commands.add_parser("amqp", help="AMQP tools")
    tools = amqp.add_subparsers(dest="amqp_command", metavar="TOOL")
    load = tools.add_parser(
        "import-definitions",
        help="load a RabbitMQ definitions export (vhosts, exchanges, queues, bindings)",
        description="Declare the vhosts, exchanges, queues (with arguments) and bindings of "
        "a RabbitMQ definitions export on a running gateway. Everything is checked first; "
        "on any failure nothing stays imported.",
    )
    load.add_argument("file", type=Path, help="definitions JSON (rabbitmqctl export_definitions)")
    load.add_argument(
        "--url",
        default="amqp://guest:guest@127.0.0.1:5672/",
        help="the gateway's AMQP URL; its vhost is replaced by each imported one",
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in vars(args).items():
        if "." in key and value is not None:
            found[key] = value
    for number, item in enumerate(args.set, 1):
        key, sep, value = item.partition("=")
        if not sep:
            # not echoed: without "=" there is no telling a name from a mistyped password
            raise ConfigError(f"--set number {number}: expected SECTION.KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def main(argv: list[str] | None = None) -> int:
    # before any thread starts, so that pulsar-client's threads inherit it
    tighten_timer_slack()
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in ("migrate", "parity", "amqp", "users", "cluster", "topics"):
        from pulsar_gateway.tools_cli import run_tool

        _exit_now(run_tool(args))
    if args.command != "run":
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        overrides = _overrides(args)
        settings = load_settings(args.config, overrides)
    except ConfigError as exc:
        for line in str(exc).splitlines():  # one line per bad setting
            print(f"pulsar-gateway: {line}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.gateway.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pulsar_gateway.gateway.data_dir_lock import DataDirBusy, DataDirLock

    # before anything touches the data directory; held until the process exits
    data_dir_lock = DataDirLock(settings.gateway.data_dir)
    try:
        data_dir_lock.acquire()
    except (DataDirBusy, OSError) as exc:
        print(f"pulsar-gateway: {exc}", file=sys.stderr)
        return 1
    from pulsar_gateway.supervisor import resolve_workers, supervise

    workers = resolve_workers(settings.gateway.workers)
    if workers > 1:
        # the supervisor only starts and watches processes: the standard loop will do
        _exit_now(asyncio.run(supervise(settings, workers, overrides, args.config)))
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    share_the_interpreter()  # the loop thread waits less for the workers' GIL
    collect_fully_less_often()  # a big request's objects do not start long full passes
    _exit_now(runner(_run(settings)))


def _exit_now(code: int) -> NoReturn:
    """Exit with `code` once everything is closed, skipping interpreter teardown, where
    pulsar-client's C++ threads can abort the process ("terminate called without an active
    exception", seen for the gateway and for `users` under load, after its work was done)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _run(settings: Any) -> int:
    from pulsar_gateway.app import run

    return await run(settings)


if __name__ == "__main__":
    sys.exit(main())
