"""`pulsar-gateway`: run the gateway (more commands come with migration)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from gateway.config import ConfigError, load_settings

EPILOG = """\
examples:
  pulsar-gateway run                      embedded Pulsar broker, Kafka on 127.0.0.1:9092
  pulsar-gateway run --kafka-port 19092   another port
  pulsar-gateway run --pulsar-url pulsar://pulsar:6650 --admin-url http://pulsar:8080
  pulsar-gateway run --set kafka.default_partitions=3 --set gateway.log_level=debug

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
        "--data-dir", dest="gateway.data_dir", help="where the embedded broker keeps data"
    )
    run.add_argument("--metrics-port", dest="metrics.port", help="/metrics and /health port (9404)")
    run.add_argument("--log-level", dest="gateway.log_level", help="debug, info, warning, error")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="any setting, repeatable",
    )
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in vars(args).items():
        if "." in key and value is not None:
            found[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "run":
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        settings = load_settings(args.config, _overrides(args))
    except ConfigError as exc:
        print(f"pulsar-gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.gateway.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    code = runner(_run(settings))
    # Everything is closed by now; skip interpreter teardown, where pulsar-client's C++
    # threads can abort the process (seen as "terminate called without an active exception").
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _run(settings: Any) -> int:
    from gateway.app import run

    return await run(settings)


if __name__ == "__main__":
    sys.exit(main())
