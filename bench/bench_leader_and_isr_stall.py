"""How long the broker's event loop stalls while it applies a LeaderAndIsr for many partitions.

In process, on a real disk: a ReplicaManager hosts `--partitions` follower replicas (created by a
first LeaderAndIsr); then, with a heartbeat callback scheduled every 10 ms on the loop, it applies

- `create`: the first LeaderAndIsr, creating them as followers (new partition dirs and files);
- `lead`: a LeaderAndIsr making this broker leader of all of them (a new leader epoch each, so
  every partition writes and fsyncs its leader-epoch checkpoint and its directory);
- `follow`: one making it a follower again (no file writes);
- `stop`: a StopReplica deleting all of them (close, rename, fsync, unlink).

For each it reports the wall time and the longest gap between heartbeats beyond their 10 ms period
(the loop's longest stall: what every other connection waited at worst). The code measured is the
`strom` package on PYTHONPATH, so the same script compares two checkouts.

Prints JSON. Usage: python bench/bench_leader_and_isr_stall.py [--partitions 1500] [--dir .]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from strom.broker.replica_manager import LeaderAndIsrPartition, ReplicaManager  # noqa: E402
from strom.config import BrokerConfig  # noqa: E402
from strom.metadata.store import PartitionState  # noqa: E402
from strom.server_common.purgatory import DelayedOperationPurgatory  # noqa: E402
from strom.server_common.timing_wheel import Timer  # noqa: E402
from strom.storage.log_manager import LogManager  # noqa: E402

PERIOD_S = 0.010
PER_TOPIC = 100


async def maybe_await(result: Any) -> Any:
    """The replica manager's state changes were synchronous before they yielded to the loop."""
    return await result if inspect.isawaitable(result) else result


async def measured(name: str, op: Any) -> dict[str, Any]:
    """Run ``op()`` while a 10 ms heartbeat records how late it fires."""
    stalls: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(PERIOD_S)
            now = time.perf_counter()
            stalls.append(max(0.0, now - last - PERIOD_S))
            last = now

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(PERIOD_S * 3)
    start = time.perf_counter()
    await maybe_await(op())
    elapsed = time.perf_counter() - start
    await asyncio.sleep(PERIOD_S * 3)
    stop.set()
    await beat
    stalls.sort()
    return {"op": name, "wall_s": round(elapsed, 3), "max_stall_ms": round(stalls[-1] * 1000, 1),
            "p99_stall_ms": round(stalls[int(len(stalls) * 0.99) - 1] * 1000, 1), "heartbeats": len(stalls)}


def lai(topics: list[tuple[str, uuid.UUID]], n: int, leader: int, epoch: int, is_new: bool
        ) -> list[LeaderAndIsrPartition]:
    out = []
    for i in range(n):
        name, topic_id = topics[i // PER_TOPIC]
        out.append(LeaderAndIsrPartition(name, topic_id, PartitionState(
            i % PER_TOPIC, leader, epoch, [1, 2], [1, 2], epoch), is_new))
    return out


async def run(partitions: int, base: str) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="lai-stall-", dir=base)
    try:
        lm = LogManager([work])
        rm = ReplicaManager(BrokerConfig({"broker.id": "1", "log.dirs": work}), lm, None,  # type: ignore[arg-type]
                            DelayedOperationPurgatory("Fetch", Timer()))
        topics = [(f"t{i}", uuid.uuid4()) for i in range((partitions + PER_TOPIC - 1) // PER_TOPIC)]
        no_configs = lambda _t: {}  # noqa: E731
        results = [
            await measured("create", lambda: rm.become_leader_or_follower(
                1, lai(topics, partitions, 2, 0, True), no_configs)),
            await measured("lead", lambda: rm.become_leader_or_follower(
                1, lai(topics, partitions, 1, 1, False), no_configs)),
            await measured("follow", lambda: rm.become_leader_or_follower(
                1, lai(topics, partitions, 2, 2, False), no_configs)),
            await measured("stop", lambda: rm.stop_replicas(
                1, {(lp.topic, lp.state.partition): True for lp in lai(topics, partitions, 2, 2, False)})),
        ]
        leaders_ok = not rm.partitions
        return {"partitions": partitions, "all_deleted": leaders_ok,
                "results": results}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1500)
    parser.add_argument("--dir", default=".", help="where the log dir goes (a real disk: fsync matters)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.partitions, args.dir)), indent=2))


if __name__ == "__main__":
    main()
