"""A task framework's run with retries and delays, through the gateway and through RabbitMQ
(issue 36): Celery with late acks, N tasks of which a third fail once and are retried after
a 0.2 s countdown and a fifth are sent with a 0.3 s countdown, on two workers, one of which
is killed -9 a third of the way through. Every task must be done, with the right result, on
both brokers; the run prints how long each took.

    python -m bench.amqp_tasks [--tasks 10000] [--no-kill]
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.gateway_process import GatewayProcess
from harness.rabbitmq_process import RabbitMQProcess
from harness.task_run import TaskRun, run_in_process

console = Console()


def _celery_url(url: str) -> str:
    return url.replace("%2F", "").rstrip("/") + "//"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--no-kill", action="store_true", help="keep both workers alive")
    args = parser.parse_args()
    kill_after = None if args.no_kill else args.tasks // 3
    runs: dict[str, TaskRun] = {}
    with tempfile.TemporaryDirectory(prefix="amqp-tasks-") as scratch:
        root = Path(scratch)
        gateway = GatewayProcess(root / "gateway").start()
        try:
            work = root / "gateway-run"
            work.mkdir()
            runs["gateway"] = run_in_process(
                _celery_url(gateway.amqp_url),
                f"t-{uuid.uuid4().hex[:8]}",
                args.tasks,
                work,
                kill_after,
            )
        finally:
            gateway.stop()
        rabbit = RabbitMQProcess(root / "rabbitmq").start()
        try:
            work = root / "rabbitmq-run"
            work.mkdir()
            runs["RabbitMQ 3.10"] = run_in_process(
                _celery_url(rabbit.url), f"t-{uuid.uuid4().hex[:8]}", args.tasks, work, kill_after
            )
        finally:
            rabbit.stop()
    table = Table(title=f"{args.tasks} Celery tasks with retries and countdowns")
    for column in ("broker", "done", "correct", "worker killed", "seconds", "tasks/s"):
        table.add_column(column)
    for name, run in runs.items():
        table.add_row(
            name,
            str(run.done),
            str(run.correct),
            "yes" if run.killed_worker else "no",
            f"{run.seconds:.1f}",
            f"{run.tasks / run.seconds:.0f}",
        )
    console.print(table)
    if any(run.correct != run.tasks for run in runs.values()):
        raise SystemExit("tasks were lost or wrong")


if __name__ == "__main__":
    main()
