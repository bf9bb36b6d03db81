"""The compatibility matrix of docs/compatibility.md, rendered from the code itself.

The tables between the GENERATED markers of that page are this module's output: every
Kafka API key the protocol specs define, with the versions the gateway serves (the one API
table, `handlers/kafka/apis/table.py`) beside the versions Kafka defines; every AMQP 0-9-1
method a client may send and whether the gateway answers it; every queue argument with what
the gateway does with it. A unit test renders them again and compares, so the page cannot
drift from the code; `python -m pulsar_gateway.compatibility_matrix --write` refreshes it.
It reads both protocol handlers, so it sits with the composition root (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pamqp import base, commands

from pulsar_gateway.handlers.amqp.authentication import KNOWN_MECHANISMS
from pulsar_gateway.handlers.amqp.broker_methods import BROKER_METHODS
from pulsar_gateway.handlers.amqp.queue_arguments import ARGUMENT_SUPPORT
from pulsar_gateway.handlers.amqp.topology import ExchangeType
from pulsar_gateway.handlers.kafka.apis.table import served_apis
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import LATEST_VERSION_UNSTABLE

BEGIN = "<!-- GENERATED: python -m pulsar_gateway.compatibility_matrix --write -->"
END = "<!-- END GENERATED -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"

# Methods of the connection and channel classes, and basic.publish, are answered by the
# connection's state machine (handlers/amqp/connection_state.py) rather than the broker's
# method table; every client needs them, so they are served by construction.
_STATE_MACHINE_METHODS = (
    commands.Connection.StartOk,
    commands.Connection.TuneOk,
    commands.Connection.Open,
    commands.Connection.Close,
    commands.Connection.CloseOk,
    commands.Connection.UpdateSecret,
    commands.Channel.Open,
    commands.Channel.Flow,
    commands.Channel.Close,
    commands.Channel.CloseOk,
    commands.Basic.Publish,
)
# Client-to-server methods of AMQP 0-9-1 that no client of RabbitMQ needs from us:
# connection.secure-ok answers a multi-step SASL challenge (PLAIN, AMQPLAIN and EXTERNAL
# take one step).
_NOT_SERVED = (commands.Connection.SecureOk,)


def kafka_versions(key: int) -> str:
    """Kafka's range for an API key, its newest version marked when Kafka's definitions call
    it unstable (Kafka's brokers then do not advertise it by default)."""
    low, high = protocol.SUPPORTED.get(key, (0, -1))
    if high < low:
        return "-"
    if key in LATEST_VERSION_UNSTABLE:
        return f"{low}-{high} ({high} unstable)"
    return f"{low}-{high}"


def kafka_table() -> str:
    rows = [
        "| API | key | served versions | Kafka's versions | why the served range stops lower |",
        "| --- | ---: | --- | --- | --- |",
    ]
    apis = served_apis()
    for key in sorted(protocol.API_NAMES):
        name = protocol.API_NAMES[key]
        low, high, why = apis.get(key, (1, 0, ""))
        served = f"**{low}-{high}**" if key in apis and high >= low else "not served"
        rows.append(f"| {name} | {key} | {served} | {kafka_versions(key)} | {why} |")
    return "\n".join(rows)


def _method_name(method: type[base.Frame]) -> str:
    return method.name  # pamqp's "Class.Method" spelling, e.g. "Basic.Publish"


def amqp_methods_table() -> str:
    served = {*BROKER_METHODS, *_STATE_MACHINE_METHODS}
    rows = ["| method | served |", "| --- | --- |"]
    methods: list[type[base.Frame]] = [*served, *_NOT_SERVED]
    for method in sorted(methods, key=lambda m: m.index):
        rows.append(f"| {_method_name(method)} | {'yes' if method in served else 'no'} |")
    return "\n".join(rows)


def queue_arguments_table() -> str:
    rows = ["| queue argument | support | note |", "| --- | --- | --- |"]
    for name in sorted(ARGUMENT_SUPPORT):
        support, note = ARGUMENT_SUPPORT[name]
        rows.append(f"| `{name}` | {support} | {note} |")
    return "\n".join(rows)


def render() -> str:
    """The generated part of docs/compatibility.md, markers included."""
    exchange_types = ", ".join(f"`{kind.value}`" for kind in ExchangeType)
    mechanisms = ", ".join(f"`{name}`" for name in KNOWN_MECHANISMS)
    return "\n\n".join(
        [
            BEGIN,
            "### Kafka API keys",
            kafka_table(),
            "### AMQP 0-9-1 methods (client to server)",
            amqp_methods_table(),
            f"Exchange types: {exchange_types}. AMQP SASL mechanisms: {mechanisms}.",
            "### Queue arguments",
            queue_arguments_table(),
            END,
        ]
    )


def generated_part(text: str) -> str:
    """The markers and what lies between them in `text` ('' when they are missing)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return ""
    return text[start : end + len(END)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/compatibility.md")
    args = parser.parse_args(argv)
    if not args.write:
        print(render())
        return 0
    text = DOC.read_text()
    current = generated_part(text)
    if not current:
        print(f"{DOC.name} has no {BEGIN} ... {END} section", file=sys.stderr)
        return 1
    DOC.write_text(text.replace(current, render()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
