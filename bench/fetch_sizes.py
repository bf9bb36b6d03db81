"""Issue 15's fetch-size scenario timed on the gateway and on tansu in one run: 1,000 records of
10 kB then 1,000 of 500 kB in one partition, read by confluent-kafka with
`max.partition.fetch.bytes` 100000 (harness/fetch_scenario.py).

    python -m bench.fetch_sizes
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from harness import fetch_scenario
from harness.gateway_process import GatewayProcess
from harness.tansu_process import TansuProcess


def run(name: str, bootstrap: str) -> None:
    started = time.monotonic()
    count = fetch_scenario.produce(bootstrap, "sizes")
    produced = time.monotonic() - started
    consumed = fetch_scenario.consume(bootstrap, "sizes", count, 300)
    print(
        f"{name:8} produce {produced:6.1f} s   read {consumed.count} records in "
        f"{consumed.seconds:6.1f} s   out of order {consumed.out_of_order}   "
        f"client errors {len(consumed.client_errors)}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        gateway = GatewayProcess(Path(data)).start()
        try:
            run("gateway", gateway.bootstrap)
        finally:
            gateway.stop()
    tansu = TansuProcess().start()
    try:
        run("tansu", tansu.bootstrap)
    finally:
        tansu.stop()


if __name__ == "__main__":
    main()
