"""Gateway start-up time against the length of its metadata history (issue 10, item 14).

    python -m bench.metadata_startup [--records 1000000]

Three data directories, each with group-offset commits over 1,000 partitions in its metadata
log: 10 commits; --records commits written by the metadata store (it snapshots as it goes);
--records commits written as a version without snapshots wrote them. For each, the seconds
from `pulsar-gateway run` to a healthy gateway and the metadata records its load read; the
old-format log is started twice, because its first start replays everything (and then
snapshots), and every later one reads from that snapshot. Goal: every later start within 2 s
of the start after 10 commits.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.gateway_process import free_port
from harness.metadata_history import populate, start_up

console = Console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    table = Table("history", "written in", "start", "start-up", "records read")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("10 commits", 10, False, ["first"]),
            (f"{args.records:,} commits", args.records, False, ["first"]),
            (f"{args.records:,} commits, old format", args.records, True, ["first", "second"]),
        ]
        for name, records, legacy, starts in cases:
            data_dir, port = Path(tmp) / name.replace(" ", "-"), free_port()
            began = time.monotonic()
            populate(data_dir, port, records, legacy=legacy)
            written = time.monotonic() - began
            for start in starts:
                seconds, read = start_up(data_dir, port)
                table.add_row(name, f"{written:.1f} s", start, f"{seconds:.2f} s", f"{read:,}")
                console.print(f"{name}: {start} start {seconds:.2f} s, {read:,} records read")
    console.print(table)


if __name__ == "__main__":
    main()
