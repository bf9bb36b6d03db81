"""The reference RabbitMQ node the AMQP differential modules share (one start per session:
a node takes about ten seconds to come up)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.rabbitmq_process import RabbitMQProcess, available


@pytest.fixture(scope="session")
def reference_rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    # the reference is part of the suite: missing, it fails (make test installs it)
    assert available(), "rabbitmq-server is not installed: run ./scripts/install-system-packages"
    node = RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq")).start()
    yield node
    node.stop()
