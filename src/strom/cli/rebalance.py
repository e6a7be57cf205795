"""`strom rebalance`: even out replicas, leaders and disk bytes across brokers (beyond Kafka's own tools).

    strom rebalance --bootstrap-server B                      # dry run: show the plan
    strom rebalance --bootstrap-server B --execute [--throttle 50000000]

The tool reads the cluster (Metadata: brokers, racks, replicas; DescribeLogDirs: the size of every
replica and each broker's disk; ListPartitionReassignments: moves already running), asks the planner
(strom.balancer) for a plan, and prints it: each partition's current and target replicas, the bytes
to copy, and per broker the replicas, leaders and disk bytes before and after. It also prints the
plan as a reassignment JSON document that `strom reassign-partitions --execute` accepts.

`--execute` runs the plan as Kafka's tools would by hand: leader-only changes first (nothing to
copy), then the data moves in batches, each with Kafka's replication throttles set (the brokers'
leader/follower.replication.throttled.rate and the topics' *.replication.throttled.replicas), waiting
for every batch to finish; then it removes the throttles and runs a preferred leader election so that
the preferred replicas the plan chose become leaders. See docs/decisions/0042-self-balancing.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from kafka.protocol.admin import DescribeConfigsRequest, DescribeLogDirsRequest

from strom.balancer import BalancerConstraints, BrokerInfo, PartitionInfo, Plan, PlanError, plan_rebalance
from strom.balancer.goals import GOALS
from strom.balancer.model import fold_log_dirs
from strom.cli.common import (
    BootstrapOption,
    CliError,
    CommandConfigOption,
    admin_client,
    cli_errors,
    client_security,
    fail,
    print_warning,
    request_timeout_ms,
    write_out,
)
from strom.cli.reassign_partitions import BROKER_THROTTLES, TOPIC_THROTTLES, set_throttles
from strom.cli.reassignment_client import (
    BROKER_RESOURCE,
    DESCRIBE_CONFIGS_VERSION,
    TOPIC_RESOURCE,
    Broker,
    ReassignmentAdmin,
    TopicPartition,
    error_name,
)
from strom.cli.reassignment_json import format_assignment

DESCRIBE_LOG_DIRS_VERSION = 4  # the first version with each dir's total and usable bytes
DEFAULT_THROTTLE = 50_000_000  # bytes/s, as `strom cluster retire-broker`
POLL_S = 1.0


class RebalanceAdmin(ReassignmentAdmin):
    """The reassignment requests plus DescribeLogDirs, which only the broker holding the dirs answers."""

    async def describe_log_dirs(self, broker: Broker) -> Any:
        response = await self._send(broker, DescribeLogDirsRequest(topics=None), DESCRIBE_LOG_DIRS_VERSION)
        if response.error_code:
            fail(f"Broker {broker.node_id} refused DescribeLogDirs: {error_name(response.error_code)}")
        return response

    async def throttled_topics(self, topics: list[str]) -> set[str]:
        """Topics with throttled-replica configs left on them (by a run cut short, or Kafka's tool)."""
        if not topics:
            return set()
        request = DescribeConfigsRequest(resources=[(TOPIC_RESOURCE, t, list(TOPIC_THROTTLES)) for t in topics],
                                         include_synonyms=False)
        response = await self._send(None, request, DESCRIBE_CONFIGS_VERSION)
        return {r.resource_name for r in response.results if not r.error_code
                and any(c.name in TOPIC_THROTTLES and c.value for c in r.configs)}


async def read_cluster(admin: RebalanceAdmin, disk_capacity: int | None
                       ) -> tuple[list[BrokerInfo], list[PartitionInfo], set[str]]:
    """The planner's input: live brokers (rack, disk capacity, offline dirs), every partition with its size,
    and the topics whose throttles a run must clear once nothing moves (moving now, or throttled already)."""
    view = await admin.load_metadata()
    ongoing = await admin.list_reassignments()
    sizes: dict[TopicPartition, int] = {}
    brokers = []
    for broker_id, broker in sorted(view.brokers.items()):
        response = await admin.describe_log_dirs(broker)
        total, offline = fold_log_dirs(response.results, sizes)
        capacity = disk_capacity if disk_capacity is not None else (total or None)
        brokers.append(BrokerInfo(broker_id, broker.rack, capacity, offline))
    partitions = []
    for tp, info in sorted(view.partitions.items()):
        moving = ongoing.get(tp)
        # While a partition moves, Metadata lists old and new replicas together; its target is what it keeps.
        replicas = moving.target if moving is not None else info.replicas
        partitions.append(PartitionInfo(tp[0], tp[1], tuple(replicas), info.leader, sizes.get(tp, 0),
                                        tuple(info.isr), reassigning=moving is not None))
    leftover = {t for t, _ in ongoing} | await admin.throttled_topics(view.topics())
    return brokers, partitions, leftover


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
                   for row in rows)


def format_plan(plan: Plan) -> str:
    """The plan as a person reads it: moves, then brokers before → after, then what could not be met."""
    out = [f"Goals (in priority order): {', '.join(plan.goals)}\n"]
    if plan.reassignments:
        rows = [["Partition", "Current replicas", "Target replicas", "Adding", "Removing", "Bytes to move"]]
        for r in plan.reassignments:
            rows.append([f"{r.topic}-{r.partition}", ",".join(map(str, r.current_replicas)),
                         ",".join(map(str, r.target_replicas)), ",".join(map(str, r.adding)) or "-",
                         ",".join(map(str, r.removing)) or "-", human_bytes(r.bytes_to_move)])
        out.append(_table(rows))
        leader_only = sum(1 for r in plan.reassignments if r.leader_only)
        out.append(f"{len(plan.reassignments)} partition(s) to reassign: {plan.replica_moves} replica move(s), "
                   f"{human_bytes(plan.bytes_to_move)} ({plan.bytes_to_move} bytes) to move, "
                   f"{leader_only} preferred-leader change(s) only\n")
    else:
        out.append("The cluster is balanced: nothing to move.\n")
    rows = [["Broker", "Rack", "Replicas before", "after", "Leaders before", "after", "Disk before", "after",
             "Capacity"]]
    for before, after in zip(plan.before, plan.after, strict=True):
        rows.append([str(before.broker_id), before.rack or "-", str(before.replicas), str(after.replicas),
                     str(before.leaders), str(after.leaders), human_bytes(before.disk_bytes),
                     human_bytes(after.disk_bytes),
                     human_bytes(before.disk_capacity_bytes) if before.disk_capacity_bytes else "-"])
    out.append("\n" + _table(rows))
    for note in plan.notes:
        out.append(f"Note: {note}\n")
    for line in plan.unsatisfied_soft:
        out.append(f"Soft goal not fully met (racks, sizes or earlier goals allow no better): {line}\n")
    return "".join(out)


def proposed_json(plan: Plan) -> str:
    return format_assignment({(r.topic, r.partition): list(r.target_replicas) for r in plan.reassignments})


def batches(plan: Plan, size: int) -> list[list[Any]]:
    """Leader-only changes in one batch first (nothing to copy), then data moves `size` partitions at a time,
    smallest first so that progress shows early."""
    leader_only = [r for r in plan.reassignments if r.leader_only]
    moving = sorted((r for r in plan.reassignments if not r.leader_only),
                    key=lambda r: (r.bytes_to_move, r.topic, r.partition))
    out = [leader_only] if leader_only else []
    out.extend(moving[i:i + size] for i in range(0, len(moving), size))
    return out


async def execute(admin: RebalanceAdmin, plan: Plan, throttle: int, batch_size: int, timeout_s: float,
                  say: Callable[[str], None], leftover_topics: Iterable[str] = ()) -> None:
    """Submit the plan batch by batch, throttled, and wait for each. Once all are done the throttles are
    removed, also those of `leftover_topics` (moves found running, maybe from a run cut short); a run that
    fails or times out leaves them, so that the moves still running stay throttled."""
    deadline = time.monotonic() + timeout_s
    groups = batches(plan, batch_size)
    moved_bytes, total_bytes = 0, plan.bytes_to_move
    topics: set[str] = set()
    for number, group in enumerate(groups, 1):
        current = {(r.topic, r.partition): list(r.current_replicas) for r in group}
        targets = {(r.topic, r.partition): list(r.target_replicas) for r in group}
        copying = any(not r.leader_only for r in group)
        if copying and throttle >= 0:
            await admin.load_metadata([])
            await set_throttles(admin, current, targets, throttle, -1)
            topics.update(t for t, _ in targets)
        results = await admin.alter_reassignments(dict[TopicPartition, list[int] | None](targets))
        refused = {tp: r for tp, r in results.items() if r[0]}
        for (t, p), (code, message) in sorted(refused.items()):
            print_warning(f"The controller refused to move {t}-{p}: {message or error_name(code)}; skipped.")
        waiting = set(targets) - set(refused)
        what = "preferred-leader change(s)" if not copying else "partition move(s)"
        say(f"batch {number}/{len(groups)}: {len(waiting)} {what} submitted")
        await _wait(admin, waiting, deadline, partial(_progress, say, f"batch {number}/{len(groups)}", len(waiting)))
        moved_bytes += sum(r.bytes_to_move for r in group if (r.topic, r.partition) in waiting)
        if copying:
            say(f"moved {human_bytes(moved_bytes)} of {human_bytes(total_bytes)}")
    if topics or leftover_topics:
        await _clear_throttles(admin, topics | set(leftover_topics), say)


def _progress(say: Callable[[str], None], batch: str, submitted: int, left: int) -> None:
    say(f"{batch}: {submitted - left}/{submitted} done")


async def _clear_throttles(admin: RebalanceAdmin, topics: set[str], say: Callable[[str], None]) -> None:
    """Kafka's throttle configs off every topic named; off the brokers too unless other moves still run."""
    still = await admin.list_reassignments()
    view = await admin.load_metadata([])
    if not still:
        for broker in sorted(view.brokers):
            try:
                await admin.alter_configs(BROKER_RESOURCE, str(broker), {}, BROKER_THROTTLES[:2])
            except CliError as exc:  # a broker's own configs change only through it
                print_warning(f"{exc.message} Broker {broker} keeps its throttle until this runs again.")
    done = sorted(t for t in topics if not any(tp[0] == t for tp in still))
    for topic in done:
        await admin.alter_configs(TOPIC_RESOURCE, topic, {}, TOPIC_THROTTLES)
    if still:
        say(f"replication throttles removed from {len(done)} topic(s); the brokers keep theirs while "
            f"{len(still)} other reassignment(s) run")
    elif topics:
        say("replication throttles removed")


async def _wait(admin: RebalanceAdmin, waiting: set[TopicPartition], deadline: float,
                progress: Callable[[int], None]) -> None:
    reported = -1
    while True:
        ongoing = await admin.list_reassignments(sorted(waiting)) if waiting else {}
        left = len([tp for tp in waiting if tp in ongoing])
        if left != reported:
            reported = left
            progress(left)
        if not left:
            return
        if time.monotonic() >= deadline:
            fail(f"{left} reassignment(s) still running when --timeout ran out; they continue in the cluster "
                 "(see `strom reassign-partitions --list`), and so do the throttles until they are done and "
                 "`strom rebalance --execute` or `strom reassign-partitions --verify` runs again.")
        await asyncio.sleep(POLL_S)


def elect_preferred_leaders(bootstrap: str, command_config: Path | None, partitions: list[TopicPartition],
                            say: Callable[[str], None]) -> None:
    """Make the preferred replicas leaders (the plan's leader balance), as kafka-leader-election.sh does."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    if not partitions:
        return
    admin = admin_client(bootstrap, command_config)
    results = admin.elect_leaders(ElectionType.PREFERRED,
                                  [KafkaTopicPartition(t, p) for t, p in partitions]).result()
    elected = sum(1 for err in results.values() if err is None)
    failed = {f"{tp.topic}-{tp.partition}": str(err) for tp, err in results.items()
              if err is not None and "ELECTION_NOT_NEEDED" not in str(err) and "not needed" not in str(err).lower()}
    say(f"preferred leader election: {elected} partition(s) changed leader")
    for name, err in sorted(failed.items()):
        print_warning(f"Preferred leader election for {name} failed: {err}")


def _percentage(value: float, option: str) -> float:
    if not 0 < value <= 100:
        fail(f"{option} is a percentage in (0, 100], got {value:g}.")
    return value / 100


def rebalance(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan only (the default).")] = False,
    execute_plan: Annotated[bool, typer.Option(
        "--execute", help="Run the plan: throttled reassignments in batches, then a preferred leader election.")
    ] = False,
    throttle: Annotated[int, typer.Option(
        "--throttle", help="Replication throttle in bytes/s while replicas move (--execute); -1 = none.")
    ] = DEFAULT_THROTTLE,
    goals: Annotated[str | None, typer.Option(
        "--goals", help=f"Comma-separated goals to optimize (hard goals always apply): {', '.join(GOALS)}.")
    ] = None,
    disk_threshold: Annotated[float, typer.Option(
        "--disk-threshold", help="Percent of a broker's disk its replicas may fill; above it, partitions move away.")
    ] = 80.0,
    disk_capacity: Annotated[int | None, typer.Option(
        "--disk-capacity", help="Disk capacity in bytes of every broker (default: the size of its log dirs' "
                                "file systems).")] = None,
    balance_threshold: Annotated[float, typer.Option(
        "--balance-threshold", help="Percent a broker may differ from the average before replicas or leaders "
                                    "move.")] = 10.0,
    max_replicas_per_broker: Annotated[int | None, typer.Option(
        "--max-replicas-per-broker", help="Hard limit of replicas per broker.")] = None,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", help="Partitions moved at once (--execute).")] = 10,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the moves (--execute).")] = 3600,
    command_config: CommandConfigOption = None,
) -> None:
    """Compute a plan that evens replicas, leaders and disk use across brokers; show it or run it."""
    with cli_errors():
        if dry_run and execute_plan:
            fail("Give --dry-run or --execute, not both.")
        if throttle < -1:
            fail("A throttle is a rate in bytes/s (or -1 for none).")
        if batch_size < 1:
            fail("--batch-size must be at least 1.")
        if disk_capacity is not None and disk_capacity <= 0:
            fail("--disk-capacity must be a positive number of bytes.")
        if balance_threshold < 0:
            fail("--balance-threshold must not be negative.")
        constraints = BalancerConstraints(
            goals=None if goals is None else tuple(g for g in goals.split(",") if g.strip()),
            disk_threshold=_percentage(disk_threshold, "--disk-threshold"),
            balance_threshold=balance_threshold / 100, max_replicas_per_broker=max_replicas_per_broker)
        security = client_security(command_config)
        timeout_ms = request_timeout_ms(command_config)

        def say(line: str) -> None:
            write_out(f"rebalance: {line}\n")
            typer.get_text_stream("stdout").flush()

        async def main() -> tuple[Plan, list[TopicPartition]]:
            admin = RebalanceAdmin(bootstrap_server, security, request_timeout_ms=timeout_ms)
            try:
                brokers, partitions, moving_topics = await read_cluster(admin, disk_capacity)
                try:
                    plan = plan_rebalance(brokers, partitions, constraints)
                except PlanError as exc:
                    fail(f"Cannot plan a rebalance: {exc}")
                write_out(format_plan(plan))
                for line in plan.unsatisfied_hard:
                    print_warning(f"hard goal not met: {line}")
                if plan.reassignments:
                    write_out(f"\nProposed partition reassignment configuration\n{proposed_json(plan)}\n")
                if not execute_plan:
                    return plan, []
                write_out("\n")
                await execute(admin, plan, throttle, batch_size, timeout, say, moving_topics)
                view = await admin.load_metadata()
                # The plan's partitions by what it wrote (a broker's Metadata may not show the new replica
                # order yet; the controller elects from its own), and any other partition led off-preferred.
                off_preferred = sorted({(r.topic, r.partition) for r in plan.reassignments} | {
                    tp for tp, info in view.partitions.items() if info.replicas and info.leader != info.replicas[0]})
                return plan, off_preferred
            finally:
                await admin.close()

        plan, off_preferred = asyncio.run(main())
        if execute_plan:
            elect_preferred_leaders(bootstrap_server, command_config, off_preferred, say)
            say(f"done: {len(plan.reassignments)} partition(s) reassigned, {human_bytes(plan.bytes_to_move)} moved")

