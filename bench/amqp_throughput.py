"""AMQP 0-9-1 server throughput and memory per connection: the gateway beside RabbitMQ, in one
run, with the same compiled load generator (bench/amqp_load, Go, amqp091-go), and ratios.

    python -m bench.amqp_throughput [--messages 200000] [--size 100] [--publishers 4]
        [--consumers 4] [--connections 1000] [--quick]

Publish: P publisher processes send --messages persistent messages in all (round-robin over C
durable queues) with publisher confirms, at most --window unconfirmed each. Consume: C consumer
processes then drain one queue each (manual ack, prefetch --prefetch, ack multiple every
--ack-every). Each phase's processes connect first and start together; a phase's rate is all
its messages over the slowest process's time. Memory: server RSS before and after opening
--connections idle connections (gateway: its own process; RabbitMQ: beam.smp). Per phase,
the servers' CPU per message, the cores they had on average ("busy") and how many more they
were ready to use but waited for ("waiting", the run-queue delay of their threads): on a
shared machine a server busy plus waiting the whole phase was CPU-bound.

The Go tool is built at start with Debian's toolchain (golang-go and
golang-github-rabbitmq-amqp091-go-dev, installed with apt-get when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.flame import Flame, flame_graph
from bench.proc import cpu_seconds, cpu_wait_seconds, rss_kib
from bench.report import bar_chart, write_report
from harness.gateway_process import GatewayProcess
from harness.rabbitmq_process import RabbitMQProcess

console = Console()
LOAD_SOURCE = Path(__file__).resolve().parent / "amqp_load"
GOPATH = Path("/usr/share/gocode")
AMQP_LIBRARY = GOPATH / "src/github.com/rabbitmq/amqp091-go"
STALL_SECONDS = 60.0


@dataclass
class Settings:
    messages: int
    size: int
    publishers: int
    consumers: int
    connections: int
    window: int
    prefetch: int
    ack_every: int


def log_problems(gateway: GatewayProcess, keep: int = 20) -> list[str]:
    """The gateway log's last warnings, errors and tracebacks, with how many there were."""
    markers = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
    text = gateway.log_path.read_text(errors="replace")
    lines = [line for line in text.splitlines() if any(m in line for m in markers)]
    return (
        [f"({len(lines)} in all, the last {keep} follow)"] if len(lines) > keep else []
    ) + lines[-keep:]


# --- processes and their memory -----------------------------------------------------------


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def beam_pid(rabbit: RabbitMQProcess) -> int:
    assert rabbit.process is not None
    for pid in descendants(rabbit.process.pid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip().startswith("beam"):
                return pid
        except OSError:
            continue
    raise RuntimeError("no beam.smp under rabbitmq-server")


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else min(hard, max(soft, needed))
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


# --- the Go load generator -----------------------------------------------------------------


def ensure_go() -> None:
    missing = []
    if shutil.which("go") is None:
        missing.append("golang-go")
    if not AMQP_LIBRARY.is_dir():
        missing.append("golang-github-rabbitmq-amqp091-go-dev")
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    install = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    console.print(f"[bold]installing {' '.join(missing)}:[/] {' '.join(install)}")
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        console.print(f"[bold]retrying after:[/] {' '.join([*sudo, 'apt-get', 'update'])}")
        subprocess.run([*sudo, "apt-get", "update", "-q"], env=env, check=True)
        subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=True)


def build_load(out_dir: Path) -> Path:
    ensure_go()
    binary = out_dir / "amqp_load"
    env = {**os.environ, "GOPATH": str(GOPATH), "GO111MODULE": "off"}
    command = ["go", "build", "-o", str(binary), "main.go"]
    console.print(f"building {LOAD_SOURCE / 'main.go'} (GOPATH={GOPATH} GO111MODULE=off)")
    subprocess.run(command, cwd=LOAD_SOURCE, env=env, check=True)
    return binary


@dataclass
class LoadProcess:
    """One amqp_load process; a thread reads its JSON lines."""

    command: list[str]
    ready: threading.Event = field(default_factory=threading.Event)
    progress: int = 0
    result: dict[str, Any] | None = None
    error: str | None = None
    process: subprocess.Popen[str] | None = None

    def start(self) -> LoadProcess:
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        return self

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                self.error = (self.error or "") + line
                continue
            kind = event.get("event")
            if kind == "ready":
                self.ready.set()
            elif kind == "progress":
                self.progress = int(event["messages"])
            elif kind == "done":
                self.progress = int(event.get("messages", event.get("connections", 0)))
                self.result = event
            elif kind == "error":
                self.error = event["error"]
        self.ready.set()

    def send(self, line: str) -> None:
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(line)
            self.process.stdin.flush()
        except BrokenPipeError:
            pass

    def close_stdin(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.running():
            assert self.process is not None
            self.process.kill()
            self.process.wait()


def run_phase(
    progress: Progress,
    label: str,
    commands: list[list[str]],
    total: int,
    watch: Callable[[], None],
) -> list[dict[str, Any]]:
    """Start the processes, let them all connect, start them together, wait for all."""
    loads = [LoadProcess(command).start() for command in commands]
    task = progress.add_task(label, total=total)
    try:
        for load in loads:
            if not load.ready.wait(60) or load.error or not load.running():
                raise RuntimeError(f"{label}: not ready: {load.error or 'timeout'}")
        for load in loads:
            load.send("go\n")
        seen, changed = -1, time.monotonic()
        while any(load.running() for load in loads):
            done = sum(load.progress for load in loads)
            progress.update(task, completed=done)
            if done != seen:
                seen, changed = done, time.monotonic()
            elif time.monotonic() - changed > STALL_SECONDS:
                raise RuntimeError(f"{label}: stalled at {done} of {total} for {STALL_SECONDS}s")
            watch()
            time.sleep(0.1)
        for load in loads:
            assert load.process is not None
            load.process.wait()
        time.sleep(0.05)  # let the readers see the last line
        progress.update(task, completed=sum(load.progress for load in loads))
        failed = [load.error or "no result" for load in loads if load.result is None]
        if failed:
            raise RuntimeError(f"{label}: {failed[0].strip()}")
        return [load.result for load in loads if load.result is not None]
    finally:
        for load in loads:
            load.kill()


# --- one server ------------------------------------------------------------------------------


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def idle_connections(
    progress: Progress, label: str, binary: Path, url: str, count: int, pids: list[int]
) -> dict[str, Any]:
    """RSS of pids before and after opening count idle connections; pids[0] is the server."""
    time.sleep(1)
    before = [rss_kib(pid) for pid in pids]
    load = LoadProcess([str(binary), "-mode", "idle", "-url", url, "-connections", str(count)])
    load.start()
    task = progress.add_task(f"{label}: {count} idle connections", total=count)
    try:
        while load.result is None and load.running():
            progress.update(task, completed=load.progress)
            time.sleep(0.1)
        time.sleep(0.05)
        if load.result is None:
            raise RuntimeError(f"idle connections: {load.error or 'exited'}")
        progress.update(task, completed=count)
        time.sleep(2)  # let the server settle
        after = [rss_kib(pid) for pid in pids]
        load.close_stdin()
        assert load.process is not None
        load.process.wait(60)
    finally:
        load.kill()
    numbers = {
        "connections": count,
        "open_s": load.result["seconds"],
        "rss_before_kib": before[0],
        "rss_after_kib": after[0],
        "kib_per_connection": (after[0] - before[0]) / count,
    }
    if len(pids) > 1:
        numbers["other_processes_rss_kib"] = {"before": before[1:], "after": after[1:]}
    return numbers


def measure_server(
    progress: Progress,
    name: str,
    url: str,
    binary: Path,
    settings: Settings,
    pids: list[int],
    flames: Path | None = None,
) -> dict[str, Any]:
    """Memory per idle connection, then confirmed publish, then consume. pids[0] is the
    process whose RSS is reported; CPU time counts all of pids (gateway: itself, pulsar-lite).
    With `flames`, each phase is profiled (pids[0], py-spy) into `{flames}-{phase}.svg`."""
    s = settings
    numbers: dict[str, Any] = {}
    try:
        numbers["memory"] = idle_connections(progress, name, binary, url, s.connections, pids)
    except Exception as error:  # noqa: BLE001 - reported, the run goes on
        numbers["memory"] = {"error": str(error)}
        progress.console.print(f"[red]{name}: {error}")
    peak = [rss_kib(pids[0])]
    started = time.monotonic()
    timeline: list[list[float]] = []  # [seconds, RSS KiB of each of pids], every 0.5 s

    def watch() -> None:
        peak[0] = max(peak[0], rss_kib(pids[0]))
        now = time.monotonic() - started
        if not timeline or now - timeline[-1][0] >= 0.5:
            timeline.append([round(now, 2), *(rss_kib(pid) for pid in pids)])

    prefix = f"bench-{name}-{time.time_ns()}"
    per_publisher = split(s.messages, s.publishers)
    per_queue = [0] * s.consumers
    for count in per_publisher:
        for queue, share in enumerate(split(count, s.consumers)):
            per_queue[queue] += share
    common = ["-url", url, "-size", str(s.size)]
    phases = {
        "publish": [
            [str(binary), "-mode", "publish", *common, "-queue", prefix]
            + ["-queues", str(s.consumers), "-messages", str(n), "-window", str(s.window)]
            for n in per_publisher
        ],
        "consume": [
            [str(binary), "-mode", "consume", *common, "-queue", f"{prefix}-{q}"]
            + ["-messages", str(n), "-prefetch", str(s.prefetch), "-ack-every", str(s.ack_every)]
            for q, n in enumerate(per_queue)
        ],
    }
    for phase, commands in phases.items():
        cpu_before = [cpu_seconds([pid]) for pid in pids]
        wait_before = [cpu_wait_seconds([pid]) for pid in pids]
        client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        profile = (
            flame_graph(pids[0], flames.with_name(f"{flames.name}-{phase}.svg"))
            if flames is not None
            else contextlib.nullcontext(Flame())
        )
        try:
            with profile as flame:
                results = run_phase(progress, f"{name}: {phase}", commands, s.messages, watch)
        except Exception as error:  # noqa: BLE001 - reported, the run goes on
            numbers[phase] = {"error": str(error)}
            progress.console.print(f"[red]{name}: {error}")
            if phase == "publish":
                numbers["consume"] = {"error": "skipped: publish failed"}
                break
            continue
        messages = sum(int(r["messages"]) for r in results)
        seconds = max(float(r["seconds"]) for r in results)
        cpu_by_process = [cpu_seconds([pid]) - b for pid, b in zip(pids, cpu_before, strict=True)]
        wait_by_process = [
            cpu_wait_seconds([pid]) - b for pid, b in zip(pids, wait_before, strict=True)
        ]
        server_cpu = sum(cpu_by_process)
        client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = (client_after.ru_utime + client_after.ru_stime) - (
            client_before.ru_utime + client_before.ru_stime
        )
        numbers[phase] = {
            "processes": len(results),
            "messages": messages,
            "seconds": seconds,
            "msg_per_s": messages / seconds,
            "mb_per_s": messages * s.size / seconds / 1e6,
            "per_process_s": [round(float(r["seconds"]), 3) for r in results],
            "nacks": sum(int(r.get("nacks", 0)) for r in results),
            "server_cpu_s": server_cpu,
            "server_cpu_s_by_process": [round(c, 2) for c in cpu_by_process],
            # ready to run but without a core (other processes on the machine had them)
            "server_cpu_wait_s_by_process": [round(w, 2) for w in wait_by_process],
            # cores the server had on average, and how many more it was ready to use: a
            # server on a core or waiting for one the whole phase was CPU-bound, however
            # long its clients waited for it
            "server_cores_busy": server_cpu / seconds,
            "server_cores_waiting": sum(wait_by_process) / seconds,
            "server_cpu_us_per_msg": server_cpu / messages * 1e6,
            "client_cpu_s": client_cpu,
        }
        latencies = [r["confirm_ms"] for r in results if r.get("confirm_ms")]
        if latencies:
            # each process's publish-to-confirm percentiles; the slowest process's stand
            numbers[phase]["confirm_ms"] = {
                name: max(float(item[name]) for item in latencies) for name in latencies[0]
            }
        if flame.path is not None:
            numbers[phase]["flame_graph"] = str(flame.path)
        elif flame.error is not None and flames is not None:
            numbers[phase]["flame_graph_error"] = flame.error
    numbers["rss_peak_kib"] = peak[0]
    numbers["rss_timeline_kib"] = timeline
    return numbers


def measure_gateway(
    progress: Progress, scratch: Path, binary: Path, settings: Settings, flames: Path | None
) -> dict[str, Any]:
    gateway = GatewayProcess(scratch / "gateway").start()
    try:
        assert gateway.process is not None
        pids = [gateway.process.pid, gateway.broker_pid()]
        broker_before = rss_kib(pids[1])
        numbers = measure_server(
            progress, "gateway", gateway.amqp_url, binary, settings, pids, flames
        )
        numbers["broker_rss_kib"] = {"before": broker_before, "after": rss_kib(pids[1])}
        numbers["log_problems"] = log_problems(gateway)
        return numbers
    finally:
        gateway.stop()


def measure_rabbitmq(
    progress: Progress, scratch: Path, binary: Path, settings: Settings, _: Path | None
) -> dict[str, Any]:
    task = progress.add_task("rabbitmq: starting", total=None)
    rabbit = RabbitMQProcess(scratch / "rabbitmq").start()
    progress.remove_task(task)
    try:
        pids = [beam_pid(rabbit)]
        return measure_server(progress, "rabbitmq", rabbit.url, binary, settings, pids)
    finally:
        rabbit.stop()


# --- report -------------------------------------------------------------------------------


def value(numbers: dict[str, Any], *path: str) -> float | None:
    item: Any = numbers
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return None
        item = item[key]
    return float(item)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000, help="in all, per phase")
    parser.add_argument("--size", type=int, default=100, help="message body bytes")
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4, help="also the number of queues")
    parser.add_argument("--connections", type=int, default=1000, help="idle, for memory")
    parser.add_argument("--window", type=int, default=500, help="unconfirmed per publisher")
    parser.add_argument("--prefetch", type=int, default=500)
    parser.add_argument("--ack-every", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    parser.add_argument("--only", choices=["gateway", "rabbitmq"], help="skip the other server")
    parser.add_argument("--out", type=Path, default=Path("reports/amqp-throughput"))
    parser.add_argument(
        "--flame-graphs", action="store_true", help="profile the gateway's phases (py-spy)"
    )
    args = parser.parse_args()
    flames = args.out.with_name(f"{args.out.name}-gateway") if args.flame_graphs else None
    if args.quick:
        args.messages, args.connections = min(args.messages, 4000), min(args.connections, 50)
    settings = Settings(
        args.messages,
        args.size,
        args.publishers,
        args.consumers,
        args.connections,
        args.window,
        args.prefetch,
        args.ack_every,
    )
    fd_limit = raise_fd_limit(args.connections * 2 + 1024)
    results: dict[str, Any] = {
        "settings": vars(settings),
        "servers": {},
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "fd_limit": fd_limit,
            "loadavg_at_start": os.getloadavg(),
            "client": "bench/amqp_load (Go, amqp091-go)",
        },
    }
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        scratch = Path(tmp)
        binary = build_load(scratch)
        servers = {"gateway": measure_gateway, "rabbitmq": measure_rabbitmq}
        for name, measure in servers.items():
            if args.only in (None, name):
                try:
                    results["servers"][name] = measure(progress, scratch, binary, settings, flames)
                except Exception as error:  # noqa: BLE001 - reported, the run goes on
                    progress.console.print(f"[red]{name}: {error}")
                    results["servers"][name] = {"error": str(error)}
    results["environment"]["loadavg_at_end"] = os.getloadavg()
    report(results, settings, args.out)


def report(results: dict[str, Any], settings: Settings, out: Path) -> None:
    servers: dict[str, dict[str, Any]] = results["servers"]
    metrics: dict[str, tuple[str, ...]] = {
        "publish msg/s": ("publish", "msg_per_s"),
        "publish MB/s": ("publish", "mb_per_s"),
        "consume msg/s": ("consume", "msg_per_s"),
        "consume MB/s": ("consume", "mb_per_s"),
        "publish confirm p50 ms": ("publish", "confirm_ms", "p50"),
        "publish confirm p99 ms": ("publish", "confirm_ms", "p99"),
        "server CPU us/msg publish": ("publish", "server_cpu_us_per_msg"),
        "server CPU us/msg consume": ("consume", "server_cpu_us_per_msg"),
        "server cores busy publish": ("publish", "server_cores_busy"),
        "server cores waiting publish": ("publish", "server_cores_waiting"),
        "server cores busy consume": ("consume", "server_cores_busy"),
        "server cores waiting consume": ("consume", "server_cores_waiting"),
        "KiB per idle connection": ("memory", "kib_per_connection"),
    }
    s = settings
    title = (
        f"{s.messages:,} msgs x {s.size} B, {s.publishers} publishers (window {s.window}), "
        f"{s.consumers} consumers (prefetch {s.prefetch}), {s.connections} idle connections"
    )
    table = Table(title=title)
    names = list(servers)
    both = "gateway" in servers and "rabbitmq" in servers
    for column in ["metric", *names, *(["gateway/RabbitMQ"] if both else [])]:
        table.add_column(column, justify="right")
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    for metric, path in metrics.items():
        row: dict[str, Any] = {"metric": metric}
        for name in names:
            number = value(servers[name], *path)
            digits = 2 if number is not None and abs(number) < 10 else 1  # cores: 0.45
            row[name] = "failed" if number is None else f"{number:,.{digits}f}"
        if both:
            gw, rmq = value(servers["gateway"], *path), value(servers["rabbitmq"], *path)
            if gw is not None and rmq:
                ratios[metric] = gw / rmq
                row["gateway/RabbitMQ"] = f"{gw / rmq:.2f}x"
            else:
                row["gateway/RabbitMQ"] = "-"
        rows.append(row)
        table.add_row(*(str(v) for v in row.values()))
    results["ratios"] = ratios
    console.print(table)
    console.print(
        "gateway/RabbitMQ: throughput higher is better; latency, CPU and memory lower is better"
    )
    for name, numbers in servers.items():
        if "error" in numbers:
            console.print(f"[red]{name}: {numbers['error']}")
        for part in ("memory", "publish", "consume"):
            if "error" in numbers.get(part, {}):
                console.print(f"[red]{name} {part}: {numbers[part]['error']}")
        for line in numbers.get("log_problems", []):
            console.print(f"[yellow]{name} log: {line}")
    charts = []
    for metric in ("publish msg/s", "consume msg/s", "KiB per idle connection"):
        bars = [(n, value(servers[n], *metrics[metric])) for n in names]
        unit = metric.split()[-1] if "/" in metric else "KiB"
        charts.append(bar_chart(metric, [(n, v) for n, v in bars if v is not None], unit))
    json_path, html_path = write_report(out, "AMQP throughput", results, charts, rows)
    console.print(f"report: {json_path} and {html_path}")


if __name__ == "__main__":
    main()
