"""`strom demo`: a single-node broker, the click generator, the Spark pipeline and the web console, together.

Each part runs as its own process in its own session, so Ctrl-C reaches only this
command, which then stops the parts in order: generator first (no new input), then the
Spark job (it finishes or abandons the current micro-batch and keeps its checkpoint),
then the broker. State stays under ``./data`` (broker) and ``./demo-output``
(checkpoints, Parquet, logs), so running the demo again resumes where it stopped.
The pipeline writes its topics exactly once (Kafka transactions), so stopping it mid-batch
and resuming never shows a window or session twice to a read_committed consumer.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer


def _pipelines_dir() -> Path:
    """The repo's ``pipelines/``: from the working directory, else next to the source tree."""
    here = Path.cwd() / "pipelines"
    if (here / "clickstream.py").is_file():
        return here
    import strom

    beside_src = Path(strom.__file__).resolve().parents[2] / "pipelines"
    if (beside_src / "clickstream.py").is_file():
        return beside_src
    raise typer.BadParameter("cannot find pipelines/clickstream.py; run `strom demo` from the Strom checkout")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes] | None, sig: int, timeout: float, name: str) -> None:
    """Signal one child by pid and wait; escalate to SIGKILL if it does not exit in time."""
    if proc is None or proc.poll() is not None:
        return
    typer.echo(f"demo: stopping {name} (pid {proc.pid})", err=True)
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        typer.echo(f"demo: {name} did not stop within {timeout:.0f}s; killing it", err=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


def _start_console(bootstrap: str, port: int, metrics_url: str | None,
                   output_dir: Path) -> subprocess.Popen[bytes] | None:
    """`strom console` beside the demo; a busy port only skips it (the demo itself still runs)."""
    if _port_open("127.0.0.1", port):
        typer.echo(f"demo: port {port} is in use; no web console (choose another with --console-port)", err=True)
        return None
    cmd = [sys.executable, "-m", "strom.cli.main", "console", "--bootstrap-server", bootstrap,
           "--host", "127.0.0.1", "--port", str(port)]
    if metrics_url:
        cmd += ["--metrics-url", metrics_url]
    log = open(output_dir / "console.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 20
    while not _port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            typer.echo(f"demo: the web console did not start; see {output_dir / 'console.log'}", err=True)
            _stop(proc, signal.SIGTERM, 5, "web console")
            return None
        time.sleep(0.1)
    typer.echo(f"demo: web console on http://127.0.0.1:{port}/ (pid {proc.pid}, log {output_dir / 'console.log'})")
    return proc


def demo(
    bootstrap_server: Annotated[
        str | None,
        typer.Option("--bootstrap-server", help="Use this running broker instead of starting one."),
    ] = None,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Broker log directory.")] = Path("data"),
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Checkpoints, Parquet output and logs.")
    ] = Path("demo-output"),
    rate: Annotated[float, typer.Option("--rate", help="Click events per second.")] = 50.0,
    master: Annotated[str | None, typer.Option("--master", help="Spark master URL.")] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the broker the demo starts.")] = 9092,
    metrics_port: Annotated[
        int, typer.Option("--metrics-port", help="Port of the started broker's /metrics, /healthz and /readyz "
                                                 "endpoint; 0 = none.")
    ] = 9308,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Stop by itself after this many seconds.")
    ] = None,
    reset: Annotated[
        bool, typer.Option("--reset", help="Delete the demo's output and checkpoints first.")
    ] = False,
    console_port: Annotated[
        int, typer.Option("--console-port", help="Port of the web console on 127.0.0.1 (0: no console).")
    ] = 8080,
) -> None:
    """Run the click-stream demo: broker + generator + PySpark Structured Streaming job."""
    pipelines = _pipelines_dir()
    output_dir = output_dir.resolve()
    if reset and output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    broker: subprocess.Popen[bytes] | None = None
    generator: subprocess.Popen[bytes] | None = None
    job: subprocess.Popen[bytes] | None = None
    console: subprocess.Popen[bytes] | None = None
    metrics_url: str | None = None
    interrupted = {"flag": False}

    def on_signal(signum: int, frame: object) -> None:
        interrupted["flag"] = True

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        if bootstrap_server is None:
            if _port_open("127.0.0.1", port):
                raise typer.BadParameter(
                    f"port {port} is already in use; pass --bootstrap-server 127.0.0.1:{port} to use that broker"
                )
            cmd = [sys.executable, "-m", "strom.cli.main", "server", "start"]
            if Path("config/server.properties").is_file():
                cmd.append("config/server.properties")
            cmd += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data_dir}"]
            if metrics_port and _port_open("127.0.0.1", metrics_port):
                typer.echo(f"demo: port {metrics_port} is in use; the broker runs without its metrics endpoint "
                           "(--metrics-port chooses another)", err=True)
                metrics_port = 0
            metrics = f"http://127.0.0.1:{metrics_port}" if metrics_port else ""
            cmd += ["--override", f"metrics.listener={metrics}"]
            metrics_url = f"{metrics}/metrics" if metrics else None
            log = open(output_dir / "broker.log", "ab")  # noqa: SIM115 - handed to the child
            broker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            deadline = time.monotonic() + 30
            while not _port_open("127.0.0.1", port):
                if broker.poll() is not None or time.monotonic() > deadline:
                    raise typer.BadParameter(f"the broker did not start; see {output_dir / 'broker.log'}")
                time.sleep(0.1)
            bootstrap_server = f"127.0.0.1:{port}"
            typer.echo(f"demo: Strom broker on {bootstrap_server} (data in {data_dir}, pid {broker.pid})")
            if metrics:
                typer.echo(f"demo: broker metrics on {metrics}/metrics (health: {metrics}/healthz, "
                           f"readiness: {metrics}/readyz)")
        if console_port:
            console = _start_console(bootstrap_server, console_port, metrics_url, output_dir)
        gen_log = open(output_dir / "generator.log", "ab")  # noqa: SIM115 - handed to the child
        generator = subprocess.Popen(
            [sys.executable, str(pipelines / "click_generator.py"), "--bootstrap-server", bootstrap_server,
             "--rate", str(rate)],
            stdout=gen_log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        gen_log.close()
        typer.echo(f"demo: click generator at {rate:g} events/s (pid {generator.pid}, log {output_dir / 'generator.log'})")
        job_cmd = [sys.executable, str(pipelines / "clickstream.py"), "--bootstrap-server", bootstrap_server,
                   "--output-dir", str(output_dir)]
        if master:
            job_cmd += ["--master", master]
        job = subprocess.Popen(job_cmd, start_new_session=True)
        typer.echo(f"demo: Spark job started (pid {job.pid}); Ctrl-C stops everything, rerun to resume")
        started = time.monotonic()
        while not interrupted["flag"]:
            if job.poll() is not None:
                typer.echo(f"demo: the Spark job exited with status {job.returncode}", err=True)
                break
            if broker is not None and broker.poll() is not None:
                typer.echo(f"demo: the broker exited; see {output_dir / 'broker.log'}", err=True)
                break
            if duration is not None and time.monotonic() - started >= duration:
                break
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(console, signal.SIGTERM, 10, "web console")
        _stop(generator, signal.SIGINT, 15, "generator")
        _stop(job, signal.SIGINT, 120, "Spark job")
        _stop(broker, signal.SIGTERM, 30, "broker")
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    typer.echo(f"demo: stopped. Results: Parquet under {output_dir / 'parquet'}, topics page-views, "
               "user-sessions and clicks-dlq (written exactly once: read them with isolation.level=read_committed).")
    if job is not None and job.returncode not in (0, None, -signal.SIGINT):
        raise typer.Exit(1)
