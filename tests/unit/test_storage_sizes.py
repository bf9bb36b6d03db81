"""Topic sizes from the embedded broker's Prometheus page (gateway/backend/storage_sizes.py):
the samples parsed into full topic names, the broker config that serves them on loopback
only, and the stored names the answer is keyed back from."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import pytest

from pulsar_gateway.gateway.backend.embedded import render_config
from pulsar_gateway.gateway.backend.storage_sizes import StorageSizes, parse_storage_sizes

PAGE = """# HELP pulsar_storage_size Stored bytes
# TYPE pulsar_storage_size gauge
pulsar_storage_size{cluster="lite",namespace="public/default",partition="0",topic="orders"} 102100
pulsar_storage_size{cluster="lite",namespace="public/default",partition="-1",topic="plain"} 1210
pulsar_storage_size{topic="we\\"ird",namespace="t/ns",partition="3",cluster="x"} 7
pulsar_in_bytes_total{cluster="lite",namespace="public/default",partition="0",topic="orders"} 5
pulsar_broker_storage_size 103317
"""


def test_samples_become_full_topic_names() -> None:
    assert parse_storage_sizes(PAGE) == {
        "persistent://public/default/orders-partition-0": 102100,
        "persistent://public/default/plain": 1210,
        'persistent://t/ns/we"ird-partition-3': 7,
    }


def test_the_broker_serves_them_on_loopback_only() -> None:
    assert 'addr = "127.0.0.1:4321"' in render_config(4321)
    assert "enabled = true" in render_config(4321)
    assert "enabled = false" in render_config()
    for config in (render_config(), render_config(4321)):
        assert config.startswith("default_partitions = 0\n")


@pytest.fixture
def metrics_page() -> Iterator[str]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the base's name
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


def test_answers_are_keyed_by_the_asked_names(metrics_page: str) -> None:
    """A topic created again is stored under another name: asked by its Kafka
    partition's name, answered under it."""
    stored = {
        "persistent://public/default/again-partition-0": "persistent://public/default/orders-partition-0"
    }
    sizes = StorageSizes(lambda name: stored.get(name, name), metrics_page)
    asked = ["persistent://public/default/again-partition-0", "persistent://public/default/gone"]
    assert asyncio.run(sizes(asked)) == {"persistent://public/default/again-partition-0": 102100}
    assert StorageSizes(str).available is False
    unreachable = StorageSizes(str, "http://127.0.0.1:9/metrics")
    assert asyncio.run(unreachable(["persistent://public/default/plain"])) == {}
