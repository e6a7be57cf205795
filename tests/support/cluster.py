"""A real ZooKeeper-coordinated Strom cluster for tests: one ZooKeeper server plus N broker processes.

Everything the harness asserts about cluster state it reads from ZooKeeper itself with kazoo
(`/brokers/ids`, `/controller`, `/brokers/topics/<t>/partitions/<p>/state`), not through
Strom's own ZooKeeper client, so a bug there cannot hide behind the harness. Every process is
started by this class and stopped by its pid; each cluster lives under its own chroot so that
several clusters could share one ZooKeeper without seeing each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from strom.metadata.zk.zookeeper_server import ZooKeeperServer
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

T = TypeVar("T")

# Short enough that a killed broker's ephemeral znode goes away quickly, long enough for a busy 2-core box.
DEFAULT_SESSION_TIMEOUT_MS = 6000
POLL_INTERVAL = 0.1
# How long close() waits for the brokers still running once the first has exited, and for all of
# them at most (see close()).
STRAGGLER_GRACE_S = 0.5
SHUTDOWN_GRACE_S = 6.0



def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process; a zombie (state Z) still answers kill(0) but counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False

class ClusterTimeout(AssertionError):
    """A `wait_for` condition did not hold in time; the message carries ZooKeeper state and broker logs."""


@dataclass(frozen=True)
class PartitionState:
    """`/brokers/topics/<t>/partitions/<p>/state` as the controller last wrote it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int


class ClusterProcess:
    """One ZooKeeper server and brokers `broker_ids` (1..N by default), each with its own dir and port.

    `overrides` apply to every broker, `broker_overrides[id]` to one; both win over the harness
    defaults. Nothing runs until `start()` (or `with ClusterProcess(...) as cluster:`).
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        brokers: int = 3,
        *,
        broker_ids: Iterable[int] | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        offsets_replication_factor: int = 3,
        overrides: dict[str, object] | None = None,
        broker_overrides: dict[int, dict[str, object]] | None = None,
        chroot: str | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        ids = list(broker_ids) if broker_ids is not None else list(range(1, brokers + 1))
        if not ids or len(set(ids)) != len(ids):
            raise ValueError(f"broker ids must be distinct and non-empty, got {ids}")
        self.broker_ids = ids
        self.session_timeout_ms = session_timeout_ms
        self.chroot = chroot or f"/strom-{uuid.uuid4().hex[:10]}"
        self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper")
        self.overrides = dict(overrides or {})
        self.broker_overrides = {k: dict(v) for k, v in (broker_overrides or {}).items()}
        self.offsets_replication_factor = min(offsets_replication_factor, len(ids))
        self._brokers: dict[int, BrokerProcess] = {}
        self._sigstopped: set[int] = set()
        self._zk: KazooClient | None = None
        for broker_id in ids:
            broker_dir = self.base_dir / f"broker-{broker_id}"
            broker_dir.mkdir(parents=True, exist_ok=True)
            self._brokers[broker_id] = BrokerProcess(broker_dir)
        for broker_id, broker in self._brokers.items():
            broker.overrides = self._broker_config(broker_id)

    # -- configuration -------------------------------------------------------
    @property
    def zookeeper_connect(self) -> str:
        """Kafka's `zookeeper.connect` for this cluster: `127.0.0.1:PORT/strom-<random>`."""
        return f"{self.zookeeper.connect_string}{self.chroot}"

    def _broker_config(self, broker_id: int) -> dict[str, object]:
        config: dict[str, object] = {
            "broker.id": broker_id,
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.session.timeout.ms": self.session_timeout_ms,
            "offsets.topic.replication.factor": self.offsets_replication_factor,
            "group.initial.rebalance.delay.ms": 0,
        }
        config.update(self.overrides)
        config.update(self.broker_overrides.get(broker_id, {}))
        return config

    # -- addresses -----------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Every broker's `host:port`, comma-separated (clients need only one to be up)."""
        return ",".join(b.bootstrap for b in self._brokers.values())

    def broker(self, broker_id: int) -> BrokerProcess:
        return self._brokers[broker_id]

    @property
    def brokers(self) -> dict[int, BrokerProcess]:
        return dict(self._brokers)

    def log_dir(self, broker_id: int) -> Path:
        """The broker's `log.dirs` (one directory per broker)."""
        return Path(self._brokers[broker_id].data_dir)

    def running(self, broker_id: int) -> bool:
        proc = self._brokers[broker_id].proc
        return proc is not None and proc.poll() is None

    # -- lifecycle -----------------------------------------------------------
    def start_zookeeper(self) -> ClusterProcess:
        """Start only ZooKeeper and the harness's own kazoo session (the chroot is created here)."""
        self.zookeeper.start()
        if self._zk is None:
            root = KazooClient(hosts=self.zookeeper.connect_string, timeout=10.0)
            root.start(timeout=15)
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
            self._zk = KazooClient(hosts=self.zookeeper_connect, timeout=10.0)
            self._zk.start(timeout=15)
        return self

    def start(self, timeout: float = 90.0) -> ClusterProcess:
        """ZooKeeper first, then every broker; returns when all are registered and a controller exists."""
        try:
            self.start_zookeeper()
            # The first broker is listening (so it normally registers first and becomes controller, as
            # before) by the time the others start; those start together (their Python start-up overlaps).
            first, *rest = self._brokers.items()
            for broker_id, broker in (first, *rest):
                try:
                    broker.start(timeout=timeout, wait=broker_id == first[0])
                except RuntimeError as exc:
                    raise RuntimeError(f"broker {broker_id} of {self!r}: {exc}") from exc
            for broker_id, broker in rest:
                try:
                    broker.wait_listening(timeout=timeout)
                except RuntimeError as exc:
                    raise RuntimeError(f"broker {broker_id} of {self!r}: {exc}") from exc
            self.wait_for(self._all_registered_with_controller, timeout,
                          f"brokers {self.broker_ids} registered under /brokers/ids and a /controller")
        except BaseException:
            self.close()
            raise
        return self

    def _all_registered_with_controller(self) -> bool:
        return (set(self.registered_brokers()) == set(self.broker_ids) and self.controller_id() is not None
                and all(self._metadata_names_controller(b) for b in self.broker_ids))

    def _metadata_names_controller(self, broker_id: int) -> bool:
        """The broker's own Metadata answer names the controller and every broker: the controller's
        UpdateMetadata reached it. Until then an admin client that asks it finds no controller (librdkafka
        then waits for its next metadata refresh, up to a minute)."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        try:
            client = self._raw_client(broker_id)
        except OSError:
            return False
        try:
            answer = decode(MetadataResponse, client.request(MetadataRequest(topics=[]), 1), 1, False)
        except (OSError, ConnectionError):
            return False
        finally:
            client.close()
        return answer.controller_id >= 0 and {b.node_id for b in answer.brokers} >= set(self.broker_ids)

    def _raw_client(self, broker_id: int) -> RawClient:
        """A bare client connected to the broker (clusters on other addresses override this)."""
        return RawClient(self._brokers[broker_id])

    def start_broker(self, broker_id: int, timeout: float = 60.0, wait_registered: bool = True) -> BrokerProcess:
        """(Re)start one broker with its old data; by default wait until it is registered again."""
        broker = self._brokers[broker_id]
        if self.running(broker_id):
            raise RuntimeError(f"broker {broker_id} is already running (pid {broker.pid})")
        self._sigstopped.discard(broker_id)
        broker.start(timeout=timeout)
        if wait_registered:
            self.wait_for(lambda: broker_id in self.registered_brokers(), timeout,
                          f"broker {broker_id} registered under /brokers/ids")
        return broker

    def kill9(self, broker_id: int) -> int | None:
        """Crash one broker (SIGKILL by pid); its ZooKeeper session expires after the session timeout."""
        self._sigstopped.discard(broker_id)
        return self._brokers[broker_id].kill9()

    def stop(self, broker_id: int, timeout: float = 60.0) -> int | None:
        """SIGTERM (controlled shutdown) and wait for the exit; SIGKILL if it outlives `timeout`."""
        if broker_id in self._sigstopped:
            self.sigcont(broker_id)
        return self._brokers[broker_id].stop(timeout)

    def sigstop(self, broker_id: int) -> None:
        """Freeze a broker (a GC pause / partitioned host): its socket stays open but nothing answers."""
        pid = self._pid(broker_id)
        os.kill(pid, signal.SIGSTOP)
        self._sigstopped.add(broker_id)

    def sigcont(self, broker_id: int) -> None:
        pid = self._pid(broker_id)
        os.kill(pid, signal.SIGCONT)
        self._sigstopped.discard(broker_id)

    def _pid(self, broker_id: int) -> int:
        if not self.running(broker_id):
            raise RuntimeError(f"broker {broker_id} is not running")
        pid = self._brokers[broker_id].pid
        assert pid is not None
        return pid

    def close(self, timeout: float = 30.0) -> None:
        """Stop every broker (SIGTERM to all, wait, SIGKILL stragglers, all by pid), then kill ZooKeeper."""
        for broker_id in list(self._sigstopped):
            with contextlib.suppress(Exception):
                self.sigcont(broker_id)
        self._sigstopped.clear()
        live = [b for b in self._brokers.values() if b.proc is not None and b.proc.poll() is None]
        for b in live:
            with contextlib.suppress(ProcessLookupError):
                b.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        # All brokers stop at once, so the last one to go leads every partition and has no peer to
        # hand them to: its controlled shutdown can only retry (controlled.shutdown.max.retries x
        # controlled.shutdown.retry.backoff.ms, 15 s by default) and give up, and the controller may
        # be waiting on it. Nothing is left to hand over, so once the first broker is gone (at once
        # for a lone broker) the others get STRAGGLER_GRACE_S, then SIGKILL; tests never look at this.
        # Should every broker wait on another, all are killed after SHUTDOWN_GRACE_S.
        started = time.monotonic()
        deadline = started + min(timeout, STRAGGLER_GRACE_S if len(live) == 1 else SHUTDOWN_GRACE_S)
        first_exit_seen = False
        while live and time.monotonic() < deadline:
            running = [b for b in live if b.proc.poll() is None]  # type: ignore[union-attr]
            if len(running) < len(live) and not first_exit_seen:
                first_exit_seen = True
                deadline = min(deadline, time.monotonic() + STRAGGLER_GRACE_S)
            live = running
            time.sleep(0.05)
        for b in live:
            with contextlib.suppress(Exception):
                b.kill9()
        if self._zk is not None:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
            self._zk = None
        self.zookeeper.kill9()  # the cluster's data is thrown away: a clean ZooKeeper shutdown buys nothing

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ZooKeeper reads -----------------------------------------------------
    @property
    def zk(self) -> KazooClient:
        """The harness's kazoo session, rooted at the cluster's chroot (read it; do not write Strom's znodes)."""
        if self._zk is None:
            raise RuntimeError("ZooKeeper is not started (call start() or start_zookeeper())")
        return self._zk

    def _read_json(self, path: str) -> Any:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return json.loads(data) if data else None

    def registered_brokers(self) -> list[int]:
        """Broker ids with a live registration (ephemeral `/brokers/ids/<id>`)."""
        try:
            return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))
        except NoNodeError:
            return []

    def controller_id(self) -> int | None:
        """`brokerid` of the ephemeral `/controller` znode, None while no broker is controller."""
        data = self._read_json("/controller")
        return None if data is None else int(data["brokerid"])

    def controller_epoch(self) -> int | None:
        try:
            data, _ = self.zk.get("/controller_epoch")
        except NoNodeError:
            return None
        return int(data)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's leader, leader epoch and ISR from ZooKeeper; None before the controller wrote it."""
        try:
            data, stat = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except NoNodeError:
            return None
        state = json.loads(data)
        return PartitionState(leader=int(state["leader"]), leader_epoch=int(state["leader_epoch"]),
                              isr=tuple(int(b) for b in state["isr"]),
                              controller_epoch=int(state.get("controller_epoch", -1)), zk_version=stat.version)

    def topic_assignment(self, topic: str) -> dict[int, list[int]]:
        """Replica assignment of each partition from `/brokers/topics/<t>` (empty if the topic is unknown)."""
        data = self._read_json(f"/brokers/topics/{topic}")
        if data is None:
            return {}
        return {int(p): [int(b) for b in replicas] for p, replicas in data.get("partitions", {}).items()}

    # -- waiting -------------------------------------------------------------
    def wait_for(self, predicate: Callable[[], T], timeout: float, what: str) -> T:
        """Poll `predicate` until it returns something other than None or False, and return that.

        (0 counts as an answer: broker 0 can be a controller or a leader.)

        Exceptions inside the predicate count as "not yet" (a broker or ZooKeeper may be between
        states) but the last one is reported. On time-out raises ClusterTimeout naming `what`,
        the last value, the ZooKeeper view and every broker's log tail.
        """
        deadline = time.monotonic() + timeout
        last: object = None
        last_exc: BaseException | None = None
        while True:
            try:
                last = predicate()
                last_exc = None
                if last is not None and last is not False:
                    return last
            except Exception as exc:  # noqa: BLE001 - reported below if it persists
                last_exc = exc
            if time.monotonic() >= deadline:
                raise ClusterTimeout(self.describe_failure(what, timeout, last, last_exc))
            time.sleep(POLL_INTERVAL)

    def describe_failure(self, what: str, timeout: float, last: object = None,
                         last_exc: BaseException | None = None, tail_lines: int = 40) -> str:
        lines = [f"timed out after {timeout:g}s waiting for: {what}", f"last value: {last!r}"]
        if last_exc is not None:
            lines.append(f"last error: {type(last_exc).__name__}: {last_exc}")
        try:
            lines.append(f"zookeeper {self.zookeeper_connect}: registered={self.registered_brokers()} "
                         f"controller={self.controller_id()}")
        except Exception as exc:  # noqa: BLE001 - the description must not fail
            lines.append(f"zookeeper {self.zookeeper_connect}: unreadable ({type(exc).__name__}: {exc})")
        for broker_id, broker in self._brokers.items():
            if broker.proc is None:
                status = "never started"
            elif broker.proc.poll() is None:
                status = f"running pid {broker.pid}" + (" (SIGSTOPped)" if broker_id in self._sigstopped else "")
            else:
                status = f"exited {broker.proc.returncode}"
            lines.append(f"--- broker {broker_id} ({broker.bootstrap}, {status}), last {tail_lines} log lines ---")
            lines.append(broker.log_tail(tail_lines) or "(empty log)")
        return "\n".join(lines)

    def wait_isr(self, topic: str, partition: int, expected: Iterable[int], timeout: float = 60.0) -> PartitionState:
        """Wait until the partition's ISR in ZooKeeper is exactly `expected` (order ignored)."""
        want = set(expected)

        def check() -> PartitionState | None:
            state = self.partition_state(topic, partition)
            return state if state is not None and set(state.isr) == want else None

        return self.wait_for(check, timeout, f"ISR of {topic}-{partition} == {sorted(want)}")

    def wait_leader(self, topic: str, partition: int, not_in: Iterable[int] = (),
                    timeout: float = 60.0) -> PartitionState:
        """Wait until the partition has a leader (not -1) outside `not_in`; returns the whole state."""
        excluded = set(not_in)

        def check() -> PartitionState | None:
            state = self.partition_state(topic, partition)
            if state is None or state.leader < 0 or state.leader in excluded:
                return None
            return state

        return self.wait_for(check, timeout, f"a leader of {topic}-{partition} not in {sorted(excluded)}")

    def wait_controller(self, not_in: Iterable[int] = (), timeout: float = 60.0) -> int:
        """Wait until `/controller` names a broker outside `not_in`; returns its id."""
        excluded = set(not_in)

        def check() -> int | None:
            cid = self.controller_id()
            return cid if cid is not None and cid not in excluded else None

        return self.wait_for(check, timeout, f"a controller not in {sorted(excluded)}")

    def __repr__(self) -> str:
        return f"ClusterProcess(brokers={self.broker_ids}, zookeeper={self.zookeeper_connect})"
