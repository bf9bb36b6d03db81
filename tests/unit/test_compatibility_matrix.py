"""docs/compatibility.md says what the code serves: its generated tables must equal a fresh
rendering from the Kafka API table, the AMQP method table and the queue argument table."""

from __future__ import annotations

from pulsar_gateway import compatibility_matrix as compatibility
from pulsar_gateway.handlers.kafka.apis.table import API_TABLE, versions_of
from pulsar_gateway.kafka_codec import protocol
from pulsar_gateway.kafka_codec.protocol.messages import ApiKey


def test_doc_matches_the_code() -> None:
    written = compatibility.generated_part(compatibility.DOC.read_text())
    assert written, "docs/compatibility.md lost its GENERATED markers"
    assert written == compatibility.render(), (
        "docs/compatibility.md is stale: run python -m pulsar_gateway.compatibility_matrix --write"
    )


def test_served_apis_are_bold_and_unserved_ones_say_so() -> None:
    table = compatibility.kafka_table()
    produce = next(line for line in table.splitlines() if line.startswith("| Produce |"))
    low, high = API_TABLE[ApiKey.PRODUCE].lowest, API_TABLE[ApiKey.PRODUCE].highest
    assert f"**{low}-{high}**" in produce
    unserved = [key for key in ApiKey if key not in API_TABLE]
    assert unserved, "every Kafka API is served: this test needs a new unserved example"
    assert all(f"| {int(key)} | not served |" in table for key in unserved), (
        "an API missing from the API table must read 'not served'"
    )


def test_refused_queue_arguments_are_listed_as_refused() -> None:
    table = compatibility.queue_arguments_table()
    assert "| `x-max-priority` | enforced |" in table
    assert "| `x-queue-version` | accepted |" in table
    assert "| `x-max-length` | enforced |" in table


def test_an_api_served_below_kafkas_newest_version_says_why() -> None:
    """A served API whose newest version stops below Kafka's must carry its reason in the
    API table, so a gap in the matrix is a decision, never an accident."""
    unexplained = [
        ApiKey(key).name
        for key, api in API_TABLE.items()
        if versions_of(key)[1] < protocol.SUPPORTED[key][1] and not api.capped_because
    ]
    assert not unexplained, f"served below Kafka's newest version without a reason: {unexplained}"
    end_txn = next(
        line for line in compatibility.kafka_table().splitlines() if line.startswith("| EndTxn |")
    )
    assert "(5 unstable)" in end_txn and "KIP-890" in end_txn
