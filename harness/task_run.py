"""A run of Celery tasks with retries and delays over one broker, with workers that may be
killed on the way: what tests/differential/test_amqp_applications.py checks and
bench/amqp_tasks.py measures."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from celery.result import ResultSet

from harness.gateway_process import REPO


@dataclass
class TaskRun:
    tasks: int
    done: int
    correct: int
    seconds: float
    killed_worker: bool


def start_worker(url: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "GATEWAY_AMQP_URL": url, "GATEWAY_TASK_QUEUE": queue}
    out = open(log, "ab")  # noqa: SIM115 - the worker's output, closed with the process
    command = [sys.executable, "-m", "celery", "-A", "harness.celery_retry_app"]
    command += ["worker", "--pool=solo", "--loglevel=WARNING", "--without-gossip"]
    command += ["--without-mingle", "--without-heartbeat", "-n", f"w{time.monotonic_ns()}@%h"]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
    out.close()
    return process


def run_tasks(
    url: str,
    queue: str,
    tasks: int,
    workdir: Path,
    kill_after: int | None = None,
    workers: int = 2,
    timeout: float = 300,
) -> TaskRun:
    """Send `tasks` tasks (every 3rd fails once and is retried after 0.2 s, every 5th is
    sent with a 0.3 s countdown), run them on `workers` workers, kill -9 one of them once
    `kill_after` results are in, and wait for every result."""
    os.environ["GATEWAY_AMQP_URL"] = url
    os.environ["GATEWAY_TASK_QUEUE"] = queue
    from harness import celery_retry_app

    app = celery_retry_app.app
    app.conf.broker_url = url
    app.conf.task_default_queue = queue
    running = [start_worker(url, queue, workdir / f"worker{i}.log") for i in range(workers)]
    killed = False
    start = time.monotonic()
    try:
        results = []
        for n in range(tasks):
            options = {"countdown": 0.3} if n % 5 == 0 else {}
            args = (n, 1 if n % 3 == 0 else 0, 0.01 if kill_after is not None else 0.0)
            results.append(celery_retry_app.work.apply_async(args, queue=queue, **options))
        values: dict[int, int] = {}
        numbers = {result.id: n for n, result in enumerate(results)}

        def arrived(task_id: str, value: int) -> None:
            nonlocal killed
            values[numbers[task_id]] = value
            if not killed and kill_after is not None and len(values) >= kill_after:
                running[0].send_signal(signal.SIGKILL)
                killed = True

        # the rpc backend's results come over one reply queue: read them as they come
        ResultSet(results, app=app).join_native(timeout=timeout, callback=arrived)
        seconds = time.monotonic() - start
        correct = sum(1 for n, value in values.items() if value == n * n)
        return TaskRun(tasks, len(values), correct, seconds, killed)
    finally:
        for process in running:
            if process.poll() is None:
                process.terminate()
        for process in running:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


def run_in_process(
    url: str, queue: str, tasks: int, workdir: Path, kill_after: int | None, timeout: float = 600
) -> TaskRun:
    """`run_tasks` in a fresh interpreter: Celery keeps its first broker's connections for
    the life of the process, and a run per broker needs its own."""
    command = [sys.executable, "-m", "harness.task_run", url, queue, str(tasks)]
    command += [str(workdir), str(kill_after if kill_after is not None else -1)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"the task run failed:\n{done.stderr[-3000:]}")
    return TaskRun(**json.loads(done.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    url_arg, queue_arg, tasks_arg, workdir_arg, kill_arg = sys.argv[1:6]
    run = run_tasks(
        url_arg,
        queue_arg,
        int(tasks_arg),
        Path(workdir_arg),
        None if int(kill_arg) < 0 else int(kill_arg),
    )
    print(json.dumps(dataclasses.asdict(run)))
