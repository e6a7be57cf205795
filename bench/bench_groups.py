"""Consumer-group benchmark: rebalance latency after a member leaves or crashes, and commit throughput.

Prints one JSON object. Members are confluent-kafka consumers in child processes (so
a crash can be a real SIGKILL). "Consuming again" means: after the departure, a marker
record produced to *every* partition has been consumed by the survivors, so the
departed member's partitions were reassigned and everyone else resumed.

    python bench/bench_groups.py                       # own broker, 3 and 10 members
    python bench/bench_groups.py --members 3 --rounds 3 --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MEMBER_SCRIPT = r"""
import signal, sys
from confluent_kafka import Consumer
bootstrap, group, topic, session, heartbeat = sys.argv[1:6]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "session.timeout.ms": int(session), "heartbeat.interval.ms": int(heartbeat),
              "enable.auto.commit": False, "log_level": 0})
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def on_assign(consumer, parts):
    print("ASSIGNED", len(parts), flush=True)
c.subscribe([topic], on_assign=on_assign)
while not stop:
    m = c.poll(0.05)
    if m is not None and not m.error():
        print("MARK", m.partition(), m.value().decode(), flush=True)
c.close()  # LeaveGroup
print("CLOSED", flush=True)
"""


class MemberProcess:
    def __init__(self, bootstrap: str, group: str, topic: str, session_ms: int, heartbeat_ms: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MEMBER_SCRIPT, bootstrap, group, topic, str(session_ms), str(heartbeat_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.assigned = -1
        self.marks: dict[str, float] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            with self.lock:
                if parts[:1] == ["ASSIGNED"]:
                    self.assigned = int(parts[1])
                elif parts[:1] == ["MARK"]:
                    self.marks[f"{parts[1]}:{parts[2]}"] = time.monotonic()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise TimeoutError(what)


def departure_round(bootstrap: str, n_members: int, partitions: int, crash: bool, session_ms: int,
                    heartbeat_ms: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    members = [MemberProcess(bootstrap, group, topic, session_ms, heartbeat_ms) for _ in range(n_members)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        wait_until(lambda: sum(max(m.assigned, 0) for m in members) == partitions
                   and all(m.assigned > 0 for m in members), 120, "initial assignment")
        # warm-up marker: everybody is fetching before the departure
        for p in range(partitions):
            producer.produce(topic, value=b"warm", partition=p)
        producer.flush(10)
        wait_until(lambda: sum(1 for m in members for k in m.marks if k.endswith(":warm")) == partitions, 60,
                   "warm-up markers")
        victim, survivors = members[0], members[1:]
        start = time.monotonic()
        if crash:
            victim.stop(signal.SIGKILL)
        else:
            victim.stop(signal.SIGTERM)
        for p in range(partitions):
            producer.produce(topic, value=b"after", partition=p)
        producer.flush(10)
        wanted = {f"{p}:after" for p in range(partitions)}

        def all_consumed() -> bool:
            seen: set[str] = set()
            for m in survivors:
                with m.lock:
                    seen |= set(m.marks)
            return wanted <= seen

        wait_until(all_consumed, session_ms / 1000 * 3 + 60, "consumption after departure")
        last = max(m.marks[k] for m in survivors for k in m.marks if k in wanted)
        return last - start
    finally:
        for m in members:
            m.stop()
        for f in admin.delete_topics([topic]).values():
            try:
                f.result(30)
            except Exception:  # noqa: BLE001 - best effort clean-up
                pass


def commit_throughput(bootstrap: str, seconds: float, partitions_per_commit: int, window: int = 64
                      ) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-commits-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions_per_commit, 1)]).values():
        f.result(30)
    results: dict[str, float] = {}
    done = [0]

    def on_commit(err: Any, parts: Any) -> None:
        done[0] += 1

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"committer-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "on_commit": on_commit, "log_level": 0})
    try:
        offsets = lambda i: [TopicPartition(topic, p, i) for p in range(partitions_per_commit)]  # noqa: E731
        c.commit(offsets=offsets(0), asynchronous=False)  # find the coordinator first
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            n += 1
            c.commit(offsets=offsets(n), asynchronous=False)
        results["sync_commits_per_s"] = n / (time.monotonic() - t0)
        done[0] = 0
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            if sent - done[0] < window:  # a bounded pipeline, like a consumer committing while it works
                sent += 1
                c.commit(offsets=offsets(n + sent), asynchronous=True)
            else:
                c.poll(0.001)
        while done[0] < sent and time.monotonic() - t0 < seconds + 30:
            c.poll(0.01)
        results["async_commits_per_s"] = done[0] / (time.monotonic() - t0)
        results["partitions_per_commit"] = partitions_per_commit
        results["async_window"] = window
        committed = c.committed(offsets(0), 30)
        assert all(tp.offset == n + sent for tp in committed), "last commit lost"
    finally:
        c.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-server")
    ap.add_argument("--members", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    ap.add_argument("--commit-seconds", type=float, default=3.0)
    args = ap.parse_args()

    broker = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        from tests.support.broker import BrokerProcess

        broker = BrokerProcess(None, {"group.min.session.timeout.ms": 1000}).start()
        bootstrap = broker.bootstrap
    out: dict[str, Any] = {
        "session_timeout_ms": args.session_timeout_ms, "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "partitions": args.partitions, "rounds": args.rounds, "assignor": "range (eager)",
        "python": sys.version.split()[0], "cpus": os.cpu_count(),
    }
    try:
        for n in args.members:
            for crash in (False, True):
                times = [departure_round(bootstrap, n, args.partitions, crash, args.session_timeout_ms,
                                         args.heartbeat_interval_ms) for _ in range(args.rounds)]
                key = f"{'crash' if crash else 'leave'}_{n}_members_s"
                out[key] = {"median": round(statistics.median(times), 3), "all": [round(t, 3) for t in times]}
        out["commits"] = {k: round(v, 1) for k, v in commit_throughput(bootstrap, args.commit_seconds, 1).items()}
        out["commits_10_partitions"] = {k: round(v, 1) for k, v in
                                        commit_throughput(bootstrap, args.commit_seconds, 10).items()}
    finally:
        if broker is not None:
            broker.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
