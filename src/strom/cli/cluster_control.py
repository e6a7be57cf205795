"""How `strom cluster stop-broker|start-broker|restart-broker N` reach the running `strom cluster up`.

`cluster up` stays the only owner of the processes it starts (it reaps them, reports their
deaths and stops them all at the end), so the other commands do not signal brokers themselves:
they hand a request to it through the cluster's data dir and wait for its answer.

* `<data-dir>/cluster.json`: the state file, rewritten (atomically) on every change: the
  supervisor's pid, ZooKeeper's pid and connect string, the session timeout, and per broker its
  pid, address, log file, state (running, stopped, exited) and the exact command line it runs.
  It is deleted when `cluster up` ends.
* `<data-dir>/control/<id>.request`: `{"action": "stop"|"start"|"restart", "broker": N}`,
  written by the command; `cluster up` polls the directory while it supervises, acts on the
  broker by the pid it holds (SIGTERM, as at teardown) or starts the recorded command line,
  and answers in `<id>.reply`: `{"ok": bool, "message": str}`. `add` (broker null) starts a
  broker with the next free id and supervises it from then on; `retire` stops one (controlled
  shutdown) and removes it from the supervised set, after `strom cluster retire-broker` has
  moved its replicas away.

Processes are only ever addressed by pid; a state file whose supervisor pid is gone means no
cluster is running there (a `cluster up` killed with SIGKILL leaves its children's pids in it).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"
CONTROL_DIR = "control"
ACTIONS = ("stop", "start", "restart", "add", "retire")


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Readers see the old or the new file, never a half-written one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """The running cluster's state, or None when no `cluster up` runs with this data dir."""
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    pid = state.get("supervisor_pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return None
    return state


def pending_requests(data_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Requests not answered yet, oldest first; unreadable ones are answered as such."""
    control = data_dir / CONTROL_DIR
    out = []
    for path in sorted(control.glob("*.request"), key=lambda p: p.stat().st_mtime_ns):
        try:
            request = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # half-written by a writer that does not rename; looked at again next poll
        out.append((path, request))
    return out


def answer(request_path: Path, ok: bool, message: str) -> None:
    write_json_atomically(request_path.with_suffix(".reply"), {"ok": ok, "message": message})
    with contextlib.suppress(OSError):
        request_path.unlink()


def send_request(data_dir: Path, action: str, broker_id: int | None, timeout: float,
                 still_running: Callable[[], bool]) -> dict[str, Any]:
    """Hand one request to the supervisor and wait for its reply (None-free: a timeout is a reply too)."""
    control = data_dir / CONTROL_DIR
    control.mkdir(parents=True, exist_ok=True)
    request_id = uuid.uuid4().hex
    request = control / f"{request_id}.request"
    reply = control / f"{request_id}.reply"
    write_json_atomically(request, {"action": action, "broker": broker_id})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if reply.exists():
                try:
                    return json.loads(reply.read_text())
                except ValueError:
                    pass
            if not still_running():
                return {"ok": False, "message": "`strom cluster up` stopped before it answered."}
            time.sleep(0.1)
        return {"ok": False, "message": f"no answer from `strom cluster up` within {timeout:g} s."}
    finally:
        for path in (request, reply):
            with contextlib.suppress(OSError):
                path.unlink()
