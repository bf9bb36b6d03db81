"""The migrations page's data: `migrate` runs and `parity` reports the tools left in the
gateway's data directory (gateway/tool_reports.py says what they write and when).

A run's file says `copying` until the tool writes its end; a tool killed before that
leaves it so, so a run whose process is gone is shown as `stopped` (run migrate again: it
goes on where it stopped). Parity reports are read once per change of their file (they
can be megabytes) and kept here, at most MAX_PARITY_REPORTS of them. Everything on this
page is for those who may see every tenant (an administrator or `describe` on the
cluster); the offending records' keys, values and headers, and the HTML report that
holds them, for administrators only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pulsar_gateway.console.kafka_view import ConsoleError, Viewer
from pulsar_gateway.gateway.tool_reports import (
    MAX_PARITY_REPORTS,
    MIGRATIONS,
    PARITY,
    REPORT_ID,
)

Json = Any
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_MIGRATIONS = 100
MAX_PARTITIONS_SHOWN = 200
RUNNING = ("starting", "copying", "groups")


def process_alive(pid: Any) -> bool:
    """Whether a process with this id runs on this machine (another account's counts)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> Json:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
    data = json.loads(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


class MigrationsView:
    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir.absolute() if data_dir is not None else None
        self._reports: dict[str, tuple[tuple[float, int], Json]] = {}  # id -> (stat, report)

    def _allowed(self, caller: Viewer) -> None:
        if not (caller.administrator or getattr(caller, "may_monitor", False)):
            raise ConsoleError(403, "migrations need an administrator or describe on the cluster")

    def overview(self, caller: Viewer) -> Json:
        """Every migration run and parity report, newest first."""
        self._allowed(caller)
        return {
            "directory": str(self.data_dir) if self.data_dir else None,
            "migrations": self.migrations(),
            "parity": [self._summary(i, r) for i, r in self._parity_reports()],
        }

    # --- migrate ------------------------------------------------------------------------

    def migrations(self) -> list[Json]:
        if self.data_dir is None:
            return []
        runs = []
        files = sorted((self.data_dir / MIGRATIONS).glob("*.json"))[:MAX_MIGRATIONS]
        for path in files:
            try:
                run = _read(path)
            except (OSError, ValueError) as exc:
                runs.append({"name": path.stem, "state": "unreadable", "error": str(exc)})
                continue
            runs.append(self._run(run))
        runs.sort(key=lambda r: -float(r.get("updated") or 0))
        return runs

    @staticmethod
    def _run(run: Json) -> Json:
        state = str(run.get("state", "unknown"))
        if state in RUNNING and not process_alive(run.get("pid")):
            state = "stopped"
        partitions = [
            p
            for p in run.get("partitions") or []
            if isinstance(p, dict)
            and isinstance(p.get("done"), int)
            and isinstance(p.get("total"), int)
        ]
        # the ones to look at first: failed, then the most left to copy
        partitions.sort(key=lambda p: (p.get("error") is None, int(p["done"]) - int(p["total"])))
        return {
            **{k: run.get(k) for k in ("name", "source", "target", "error", "groups")},
            **{k: run.get(k) for k in ("started", "updated", "total", "done")},
            "state": state,
            "records_per_second": run.get("records_per_second"),
            "updated_seconds_ago": round(time.time() - float(run.get("updated") or 0), 1),
            "partition_count": len(partitions),
            "partitions_finished": sum(1 for p in partitions if p.get("finished")),
            "partitions_failed": sum(1 for p in partitions if p.get("error")),
            "partitions": partitions[:MAX_PARTITIONS_SHOWN],
        }

    # --- parity -------------------------------------------------------------------------

    def _parity_reports(self) -> list[tuple[str, Json]]:
        if self.data_dir is None:
            return []
        directory = self.data_dir / PARITY
        ids = sorted(
            (p.stem for p in directory.glob("*.json") if REPORT_ID.match(p.stem)), reverse=True
        )[:MAX_PARITY_REPORTS]
        found = []
        for report_id in ids:
            report = self._report(report_id)
            if report is not None:
                found.append((report_id, report))
        for gone in set(self._reports) - set(ids):
            del self._reports[gone]
        return found

    def _report(self, report_id: str) -> Json | None:
        assert self.data_dir is not None
        path = self.data_dir / PARITY / f"{report_id}.json"
        try:
            stat = path.stat()
            key = (stat.st_mtime, stat.st_size)
            cached = self._reports.get(report_id)
            if cached is not None and cached[0] == key:
                return cached[1]
            report = _read(path)
        except (OSError, ValueError):
            return None
        self._reports[report_id] = (key, report)
        return report

    @staticmethod
    def _summary(report_id: str, report: Json) -> Json:
        partitions = [p for p in report.get("partitions") or [] if isinstance(p, dict)]
        groups = [g for g in report.get("groups") or [] if isinstance(g, dict)]
        return {
            "id": report_id,
            "time": report_id.split("Z-", 1)[0] + "Z",
            "migration": report.get("migration"),
            "verdict": report.get("verdict"),
            "source": report.get("source"),
            "target": report.get("target"),
            "seconds": report.get("seconds"),
            "totals": report.get("totals") or {},
            "partitions": len(partitions),
            "failing_partitions": sum(1 for p in partitions if not p.get("ok")),
            "groups_drifting": sum(1 for g in groups if g.get("drift")),
        }

    def parity_report(self, caller: Viewer, report_id: str) -> Json:
        """One report: its summary, the partitions that failed with their offending
        records (the examples parity kept), and the groups whose offsets drift."""
        self._allowed(caller)
        report = self._known_report(report_id)
        failing = [
            p for p in report.get("partitions") or [] if isinstance(p, dict) and not p.get("ok")
        ]
        offending = []
        for p in failing[:MAX_PARTITIONS_SHOWN]:
            for kind, examples in sorted((p.get("examples") or {}).items()):
                for example in examples if isinstance(examples, list) else []:
                    row = {
                        "topic": p.get("topic"),
                        "partition": p.get("partition"),
                        "problem": kind,
                        "source_offset": example.get("source_offset"),
                        "target_offset": example.get("target_offset"),
                    }
                    if caller.administrator:
                        row["source_record"] = example.get("source_record")
                        row["target_record"] = example.get("target_record")
                    offending.append(row)
        return {
            **self._summary(report_id, report),
            "records_shown": caller.administrator,
            "failing": [
                {k: v for k, v in p.items() if k != "examples"}
                for p in failing[:MAX_PARTITIONS_SHOWN]
            ],
            "offending": offending,
            "groups": [
                g for g in report.get("groups") or [] if isinstance(g, dict) and g.get("drift")
            ][:MAX_PARTITIONS_SHOWN],
        }

    def parity_html(self, caller: Viewer, report_id: str) -> bytes:
        """The report's own HTML page (it shows the offending records): administrators."""
        if not caller.administrator:
            raise ConsoleError(403, "the HTML report shows records: administrators only")
        self._known_report(report_id)
        assert self.data_dir is not None
        try:
            return (self.data_dir / PARITY / f"{report_id}.html").read_bytes()
        except OSError as exc:
            raise ConsoleError(404, "this report has no HTML page") from exc

    def _known_report(self, report_id: str) -> Json:
        if self.data_dir is None or not REPORT_ID.match(report_id):
            raise ConsoleError(404, "no such parity report")
        report = self._report(report_id)
        if report is None:
            raise ConsoleError(404, "no such parity report")
        return report
