"""Transactions benchmark: transactional producer throughput and commit latency, read_committed reads.

Prints one JSON object. In one run, against one broker it starts itself (or --bootstrap-server):

- ``idempotent``: an idempotent acks=all confluent-kafka producer, the baseline;
- ``txn_100ms`` / ``txn_1s``: the same producer made transactional, committing every 100 ms / 1 s;
  records/s, MB/s, ratio to the baseline, and commit latency p50/p99 (commit_transaction() calls);
- ``consume``: one consumer reading the transactional topic from the start, read_uncommitted vs
  read_committed (aborted transactions included: every tenth transaction is aborted).

Phases alternate over ``--rounds`` rounds and the medians are reported, because this machine is
shared and noisy.

    python bench/bench_transactions.py                   # 8 s per producer phase, 2 rounds
    python bench/bench_transactions.py --seconds 4 --rounds 1 --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _producer_conf(bootstrap: str, transactional_id: str | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                            "linger.ms": 5, "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 256 * 1024,
                            "log_level": 0}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    return conf


def produce_phase(bootstrap: str, topic: str, seconds: float, record_size: int, commit_every_s: float | None,
                  abort_every: int = 0) -> dict[str, Any]:
    """Produce for ``seconds``; with ``commit_every_s`` in transactions committed that often."""
    from confluent_kafka import KafkaException, Producer

    txn = commit_every_s is not None
    p = Producer(_producer_conf(bootstrap, f"bench-{uuid.uuid4().hex[:8]}" if txn else None))
    if txn:
        p.init_transactions(30)
    value = os.urandom(record_size)
    sent = 0
    commits: list[float] = []
    aborted = 0
    start = time.perf_counter()
    end = start + seconds
    n_txn = 0
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if txn:
            p.begin_transaction()
        txn_end = min(end, now + commit_every_s) if txn else end
        while time.perf_counter() < txn_end:
            for _ in range(500):
                try:
                    p.produce(topic, value)
                    sent += 1
                except BufferError:
                    p.poll(0.005)
                    break
            p.poll(0)
        if txn:
            n_txn += 1
            t0 = time.perf_counter()
            try:
                if abort_every and n_txn % abort_every == 0:
                    p.abort_transaction(30)
                    aborted += 1
                else:
                    p.commit_transaction(30)
                    commits.append(time.perf_counter() - t0)
            except KafkaException as exc:
                raise SystemExit(f"transaction failed: {exc}") from exc
    if not txn:
        p.flush(60)
    elapsed = time.perf_counter() - start
    out: dict[str, Any] = {"records": sent, "seconds": round(elapsed, 3),
                           "records_per_s": round(sent / elapsed), "mb_per_s": round(sent * record_size / elapsed / 1e6, 1)}
    if txn:
        commits.sort()
        out["transactions"] = n_txn
        out["aborted"] = aborted
        if commits:
            out["commit_ms_p50"] = round(1000 * statistics.median(commits), 2)
            out["commit_ms_p99"] = round(1000 * commits[min(len(commits) - 1, int(0.99 * len(commits)))], 2)
    return out


def consume_phase(bootstrap: str, topic: str, isolation: str, expected_min: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "fetch.max.bytes": 64 * 1024 * 1024,
                  "log_level": 0})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.assign([TopicPartition(topic, 0, lo)])
    got = 0
    last_offset = -1
    start = time.perf_counter()
    idle_since = None
    while last_offset < hi - 2:
        msgs = c.consume(10_000, 0.5)
        if not msgs:
            idle_since = idle_since or time.perf_counter()
            if time.perf_counter() - idle_since > 3:
                break  # the tail is a marker: nothing left to deliver
            continue
        idle_since = None
        for m in msgs:
            if m.error():
                continue
            got += 1
            last_offset = m.offset()
    elapsed = time.perf_counter() - start - (3 if idle_since else 0)
    c.close()
    return {"isolation": isolation, "records": got, "records_per_s": round(got / max(elapsed, 1e-9)),
            "complete": got >= expected_min}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = statistics.median(values) if all(isinstance(v, int | float) and not isinstance(v, bool)
                                                    for v in values) else values[-1]
    out["runs"] = len(runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-server")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--record-size", type=int, default=1024)
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    broker = None
    tmp = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        from tests.support.broker import BrokerProcess

        tmp = tempfile.TemporaryDirectory(prefix="strom-bench-txn-")
        broker = BrokerProcess(tmp.name).start()
        bootstrap = broker.bootstrap
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        results: dict[str, list[dict[str, Any]]] = {"idempotent": [], "txn_100ms": [], "txn_1s": []}
        consume: dict[str, list[dict[str, Any]]] = {"read_uncommitted": [], "read_committed": []}
        for _ in range(args.rounds):
            topics = {name: f"bench-txn-{name}-{uuid.uuid4().hex[:6]}" for name in results}
            for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()]).values():
                f.result(30)
            results["idempotent"].append(produce_phase(bootstrap, topics["idempotent"], args.seconds,
                                                       args.record_size, None))
            results["txn_100ms"].append(produce_phase(bootstrap, topics["txn_100ms"], args.seconds,
                                                      args.record_size, 0.1))
            results["txn_1s"].append(produce_phase(bootstrap, topics["txn_1s"], args.seconds, args.record_size,
                                                   1.0, abort_every=10))
            # read the 100 ms topic: the most markers per byte
            n = results["txn_100ms"][-1]["records"]
            for iso in consume:
                consume[iso].append(consume_phase(bootstrap, topics["txn_100ms"], iso, n))
        out: dict[str, Any] = {"record_size": args.record_size, "seconds_per_phase": args.seconds}
        for name, runs in results.items():
            out[name] = median_of(runs)
        base = out["idempotent"]["records_per_s"]
        for name in ("txn_100ms", "txn_1s"):
            out[name]["vs_idempotent"] = round(out[name]["records_per_s"] / base, 3) if base else None
        out["consume"] = {iso: median_of(runs) for iso, runs in consume.items()}
        ru = out["consume"]["read_uncommitted"]["records_per_s"]
        out["consume"]["read_committed_vs_uncommitted"] = round(
            out["consume"]["read_committed"]["records_per_s"] / ru, 3) if ru else None
        print(json.dumps(out, indent=2))
    finally:
        if broker is not None:
            broker.stop()
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
