"""Retiring a broker: move every replica it holds to the other brokers, then let it go.

`strom cluster retire-broker N` is the whole of Kafka's manual procedure in one command: plan
where each of N's replicas goes, start the reassignments with a replication throttle, wait until
the controller reports them all done, clear the throttles, and only then stop N (controlled
shutdown) and drop it from the supervised set. Nothing is written to N's log dirs or removed from
them; a retirement cut short (Ctrl-C, timeout) leaves the reassignments running in the controller,
and running the command again picks them up.

The plan (pure, see `plan_retirement`) keeps every partition's replication factor and replica
order (a new replica takes N's place, so a partition N preferred to lead gets the newcomer as
preferred leader), keeps rack spread (a broker whose rack the partition does not use yet wins),
and evens replica counts: each replica goes to the least-loaded eligible broker, ties to the
lowest id. It refuses when fewer brokers than the largest replication factor would remain, and
when some partition's in-sync replicas other than N are fewer than its min.insync.replicas: such
a partition would depend on N alone for acks=all writes while the move catches up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from strom.cli.common import CliError, fail
from strom.cli.reassign_partitions import clear_throttles, set_throttles
from strom.cli.reassignment_client import ClusterView, ReassignmentAdmin, TopicPartition, error_name

DEFAULT_THROTTLE = 50_000_000  # bytes/s: far above what one local cluster writes, well below a disk
POLL_S = 1.0


@dataclass(slots=True)
class RetirementPlan:
    moves: dict[TopicPartition, list[int]]  # partition -> its new replica set (without the broker)
    current: dict[TopicPartition, list[int]]


def plan_retirement(view: ClusterView, broker_id: int,
                    skip: set[TopicPartition] | frozenset[TopicPartition] = frozenset(),
                    targets: Mapping[TopicPartition, Sequence[int]] | None = None) -> RetirementPlan:
    """Where each replica of `broker_id` goes (partitions in `skip` are already moving off it).

    `targets` are the final replica sets of reassignments in progress: while one runs, Metadata lists
    the old and the new replicas together, which is not the replication factor the partition keeps."""
    remaining = sorted(b for b in view.brokers if b != broker_id)
    factors = {tp: len((targets or {}).get(tp, info.replicas)) for tp, info in view.partitions.items()
               if tp not in skip}  # ours, moving: a broker's Metadata may still list old and new replicas
    max_rf = max(factors.values(), default=0)
    if max_rf > len(remaining):
        widest = sorted({t for (t, p), rf in factors.items() if rf == max_rf})
        fail(f"Cannot retire broker {broker_id}: topic '{widest[0]}' has replication factor {max_rf} but only "
             f"{len(remaining)} broker(s) would remain ({','.join(map(str, remaining)) or 'none'}); add a broker "
             "first (`strom cluster add-broker`).")
    racks = {b: view.brokers[b].rack for b in remaining}
    load: Counter[int] = Counter({b: 0 for b in remaining})
    for info in view.partitions.values():
        load.update(r for r in info.replicas if r != broker_id and r in load)
    moves: dict[TopicPartition, list[int]] = {}
    current: dict[TopicPartition, list[int]] = {}
    for tp, info in sorted(view.partitions.items()):
        if broker_id not in info.replicas or tp in skip:
            continue
        used_racks = {racks.get(r) for r in info.replicas if r != broker_id}
        candidates = [b for b in remaining if b not in info.replicas]
        if not candidates:
            continue  # only when `view` is a stale mid-move picture; the next look plans it
        target = min(candidates, key=lambda b: (racks[b] is not None and racks[b] in used_racks, load[b], b))
        load[target] += 1
        current[tp] = list(info.replicas)
        moves[tp] = [target if r == broker_id else r for r in info.replicas]
    return RetirementPlan(moves, current)


def below_min_isr(view: ClusterView, broker_id: int, min_isr: dict[str, int]) -> list[str]:
    """Partitions of the broker whose other in-sync replicas are fewer than min.insync.replicas."""
    out = []
    for (topic, partition), info in sorted(view.partitions.items()):
        if broker_id not in info.replicas:
            continue
        others = [r for r in info.isr if r != broker_id]
        needed = min_isr.get(topic, 1)
        if len(others) < needed:
            out.append(f"{topic}-{partition} (in-sync replicas {','.join(map(str, info.isr)) or 'none'}, "
                       f"min.insync.replicas={needed})")
    return out


async def move_replicas_off(admin: ReassignmentAdmin, broker_id: int, throttle: int, timeout_s: float,
                            isr_wait_s: float, say: Callable[[str], None]) -> int:
    """Reassign every replica of `broker_id` elsewhere and wait until none is left; returns how many moved."""
    view = await admin.load_metadata()
    if broker_id not in view.brokers:
        fail(f"Broker {broker_id} is not a live broker of this cluster (live: "
             f"{','.join(map(str, sorted(view.brokers)))}).")
    ongoing = await admin.list_reassignments()
    blocking = sorted(f"{t}-{p}" for (t, p), state in ongoing.items() if broker_id in state.target)
    if blocking:
        fail(f"Reassignments in progress move replicas onto broker {broker_id} ({', '.join(blocking)}); wait for "
             "them or cancel them (`strom reassign-partitions --list` / `--cancel`) before retiring it.")
    # Ours from an earlier run that was cut short: waited for, not planned again.
    resumed = {tp for tp, state in ongoing.items() if broker_id in state.replicas}
    deadline = time.monotonic() + isr_wait_s
    while True:
        min_isr = await admin.min_insync_replicas(view.topics())
        lagging = below_min_isr(view, broker_id, min_isr)
        if not lagging or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
        view = await admin.load_metadata()
    if lagging:
        fail(f"Cannot retire broker {broker_id}: without it these partitions would be below min.insync.replicas "
             f"until their new replicas catch up: {'; '.join(lagging)}. Wait until their replicas are back in "
             "sync (`strom topics --describe --under-replicated-partitions`) and try again.")
    plan = plan_retirement(view, broker_id, resumed, {tp: state.target for tp, state in ongoing.items()})
    waiting = set(plan.moves) | resumed
    if not waiting:
        say(f"broker {broker_id} holds no replicas")
        return 0
    if plan.moves:
        targets = Counter(b for tp, replicas in plan.moves.items() for b in replicas if b not in plan.current[tp])
        say(f"moving {len(plan.moves)} replica(s) off broker {broker_id}: "
            + ", ".join(f"{n} to broker {b}" for b, n in sorted(targets.items()))
            + (f" (throttle {throttle} B/s)" if throttle >= 0 else " (no throttle)"))
        if throttle >= 0:
            await set_throttles(admin, plan.current, plan.moves, throttle, -1)
        results = await admin.alter_reassignments(plan.moves)
        failed = {tp: r for tp, r in results.items() if r[0]}
        if failed:
            fail("The controller refused to move " + "; ".join(
                f"{t}-{p}: {message or error_name(code)}" for (t, p), (code, message) in sorted(failed.items())))
    if resumed:
        say(f"waiting for {len(resumed)} reassignment(s) already in progress")
    await _wait_done(admin, broker_id, waiting, timeout_s, say)
    if throttle >= 0:
        await clear_throttles(admin, {t for t, _ in waiting}, announce=False)
    return len(waiting)


async def _wait_done(admin: ReassignmentAdmin, broker_id: int, waiting: set[TopicPartition], timeout_s: float,
                     say: Callable[[str], None]) -> None:
    """Until no partition lists the broker and none of ours is still reassigning; progress when it changes."""
    total = len(waiting)
    deadline = time.monotonic() + timeout_s
    reported = -1
    while True:
        late: RetirementPlan | None = None
        ongoing = await admin.list_reassignments()
        view = await admin.load_metadata()
        holding = {tp for tp, info in view.partitions.items() if broker_id in info.replicas}
        # Partitions created on the broker meanwhile (the stale-metadata refusal is the first look's job).
        with contextlib.suppress(CliError):
            late = plan_retirement(view, broker_id, waiting | set(ongoing),
                                   {tp: state.target for tp, state in ongoing.items()})
        if late is not None and late.moves:
            results = await admin.alter_reassignments(late.moves)
            waiting |= {tp for tp, (code, _) in results.items() if not code}
            total = len(waiting)
        left = sorted(tp for tp in waiting if tp in holding or tp in ongoing)
        done = total - len(left)
        if done != reported:
            reported = done
            say(f"moved {done}/{total} partition(s) off broker {broker_id}")
        if not left:
            return
        if time.monotonic() >= deadline:
            fail(f"Broker {broker_id} still holds replicas of {len(left)} partition(s) after {timeout_s:g} s "
                 f"({', '.join(f'{t}-{p}' for t, p in left[:10])}{', ...' if len(left) > 10 else ''}). The "
                 "reassignments keep running: `strom reassign-partitions --list` shows them; run retire-broker "
                 "again to wait for them and finish.")
        await asyncio.sleep(POLL_S)
