"""`strom reassign-partitions`: move partition replicas between brokers (like kafka-reassign-partitions.sh).

    strom reassign-partitions --bootstrap-server B --generate --topics-to-move-json-file T.json --broker-list 1,2,4
    strom reassign-partitions --bootstrap-server B --execute --reassignment-json-file R.json [--throttle 50000000]
    strom reassign-partitions --bootstrap-server B --verify --reassignment-json-file R.json
    strom reassign-partitions --bootstrap-server B --cancel --reassignment-json-file R.json
    strom reassign-partitions --bootstrap-server B --list

The flags, the JSON files and the printed lines are Kafka's, so runbooks and scripts written for
Kafka's tool work unchanged. The controller does the moving (KIP-455: new replicas are added and
catch up, then the old ones are removed); this tool only asks for it, reports on it and manages the
replication throttles as Kafka's tool does: `--execute --throttle` sets the brokers'
`leader|follower.replication.throttled.rate` on every broker of a moving partition and the topics'
`leader|follower.replication.throttled.replicas` (current replicas lead, new replicas follow), and
`--verify` or `--cancel` clear them once nothing is moving any more (`--preserve-throttles` keeps them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Annotated, TypeVar

import kafka.errors as Errors
import typer

from strom.cli.common import (
    BootstrapOption,
    CliError,
    CommandConfigOption,
    cli_errors,
    client_security,
    fail,
    print_warning,
    request_timeout_ms,
    write_out,
)
from strom.cli.reassignment_client import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    ClusterView,
    ReassignmentAdmin,
    TopicPartition,
    error_name,
)
from strom.cli.reassignment_json import (
    PartitionMove,
    format_assignment,
    parse_broker_list,
    read_reassignment,
    read_topics_to_move,
)
from strom.metadata.replica_assignment import BrokerMetadata, assign_replicas_to_brokers

T = TypeVar("T")

BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                    "replica.alter.log.dirs.io.max.bytes.per.second")
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
TOPIC_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
METADATA_SETTLE_TRIES = 10


def run_admin(bootstrap: str, command_config: Path | None, fn: Callable[[ReassignmentAdmin], Awaitable[T]]) -> T:
    """Run one tool action with a ReassignmentAdmin that is closed afterwards."""
    security = client_security(command_config)
    timeout_ms = request_timeout_ms(command_config)

    async def main() -> T:
        admin = ReassignmentAdmin(bootstrap, security, request_timeout_ms=timeout_ms)
        try:
            return await fn(admin)
        finally:
            await admin.close()

    return asyncio.run(main())


def reassign_partitions(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    command_config: CommandConfigOption = None,
    generate: Annotated[bool, typer.Option("--generate", help="Propose a reassignment of the topics in "
                                           "--topics-to-move-json-file onto --broker-list (prints it, moves nothing).")
                        ] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Start the reassignment in --reassignment-json-file.")
                       ] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Report whether the reassignment in "
                                         "--reassignment-json-file is done; clears the throttles once it is.")
                      ] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel the active reassignments of the partitions in "
                                         "--reassignment-json-file (their replicas go back to the old set).")
                      ] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the partition reassignments in progress.")] = False,
    topics_to_move_json_file: Annotated[Path | None, typer.Option(
        "--topics-to-move-json-file", help='{"version":1,"topics":[{"topic":"foo"}]}: topics for --generate.',
        dir_okay=False)] = None,
    broker_list: Annotated[str | None, typer.Option(
        "--broker-list", help="Broker ids to spread the topics over with --generate, like 1,2,3.")] = None,
    reassignment_json_file: Annotated[Path | None, typer.Option(
        "--reassignment-json-file", help='{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2]}]}'
        " (as --generate prints it).", dir_okay=False)] = None,
    disable_rack_aware: Annotated[bool, typer.Option(
        "--disable-rack-aware", help="--generate ignores broker.rack.")] = False,
    throttle: Annotated[int, typer.Option(
        "--throttle", help="Replication throttle in bytes/s for the moving replicas (--execute); -1 = none.")] = -1,
    replica_alter_log_dirs_throttle: Annotated[int, typer.Option(
        "--replica-alter-log-dirs-throttle",
        help="Throttle in bytes/s for moves between log dirs of one broker (--execute); -1 = none.")] = -1,
    additional: Annotated[bool, typer.Option(
        "--additional", help="--execute even though other reassignments are in progress (or change their "
        "throttle).")] = False,
    preserve_throttles: Annotated[bool, typer.Option(
        "--preserve-throttles", help="--verify/--cancel leave the throttles in place.")] = False,
    timeout: Annotated[int, typer.Option(
        "--timeout", help="Milliseconds --execute waits for log-dir moves to be accepted.")] = 10000,
) -> None:
    """Move partition replicas between brokers: generate, execute, verify, cancel or list reassignments."""
    with cli_errors():
        actions = [name for name, on in (("--generate", generate), ("--execute", execute), ("--verify", verify),
                                         ("--cancel", cancel), ("--list", list_)) if on]
        if len(actions) != 1:
            fail("Give exactly one action: --generate, --execute, --verify, --cancel or --list.")
        action = actions[0]
        if action == "--generate":
            if topics_to_move_json_file is None or broker_list is None:
                fail("--generate needs --topics-to-move-json-file and --broker-list.")
        elif action in ("--execute", "--verify", "--cancel") and reassignment_json_file is None:
            fail(f"{action} needs --reassignment-json-file.")
        if action != "--execute" and (throttle != -1 or replica_alter_log_dirs_throttle != -1 or additional):
            fail("--throttle, --replica-alter-log-dirs-throttle and --additional go with --execute only.")
        if action not in ("--verify", "--cancel") and preserve_throttles:
            fail("--preserve-throttles goes with --verify or --cancel only.")
        if throttle < -1 or replica_alter_log_dirs_throttle < -1:
            fail("A throttle is a rate in bytes/s (or -1 for none).")

        if action == "--generate":
            topics = read_topics_to_move(topics_to_move_json_file)  # type: ignore[arg-type]
            brokers = parse_broker_list(broker_list)  # type: ignore[arg-type]
            run_admin(bootstrap_server, command_config,
                      lambda a: _generate(a, topics, brokers, not disable_rack_aware))
        elif action == "--execute":
            moves = read_reassignment(reassignment_json_file)  # type: ignore[arg-type]
            run_admin(bootstrap_server, command_config,
                      lambda a: _execute(a, moves, throttle, replica_alter_log_dirs_throttle, additional, timeout))
        elif action == "--verify":
            moves = read_reassignment(reassignment_json_file)  # type: ignore[arg-type]
            run_admin(bootstrap_server, command_config, lambda a: _verify(a, moves, preserve_throttles))
        elif action == "--cancel":
            moves = read_reassignment(reassignment_json_file)  # type: ignore[arg-type]
            run_admin(bootstrap_server, command_config, lambda a: _cancel(a, moves, preserve_throttles))
        else:
            run_admin(bootstrap_server, command_config, _list)


# -- --generate ----------------------------------------------------------------------------------------------
async def _generate(admin: ReassignmentAdmin, topics: list[str], broker_ids: list[int], rack_aware: bool) -> None:
    view = await admin.load_metadata(topics)
    _refuse_missing_topics(view)
    check_brokers_known(view, broker_ids)
    brokers = [BrokerMetadata(b, view.brokers[b].rack if rack_aware else None) for b in broker_ids]
    if rack_aware and any(b.rack for b in brokers) and not all(b.rack for b in brokers):
        without = [b.id for b in brokers if not b.rack]
        fail(f"Not all brokers have rack information (broker(s) {_ids(without)} have no broker.rack); "
             "add --disable-rack-aware to assign replicas without it.")
    current: dict[TopicPartition, list[int]] = {}
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in topics:
        partitions = view.topic_partitions(topic)
        for p, info in partitions.items():
            current[(topic, p)] = list(info.replicas)
        replication_factor = len(partitions[min(partitions)].replicas)
        if replication_factor > len(brokers):
            fail(f"Topic '{topic}' has replication factor {replication_factor} but --broker-list names only "
                 f"{len(brokers)} broker(s).")
        try:
            plan = assign_replicas_to_brokers(brokers, len(partitions), replication_factor)
        except Errors.KafkaError as exc:
            fail(f"Cannot place topic '{topic}': {exc}")
        for index, p in enumerate(sorted(partitions)):
            proposed[(topic, p)] = plan[index]
    write_out(f"Current partition replica assignment\n{format_assignment(current)}\n\n"
              f"Proposed partition reassignment configuration\n{format_assignment(proposed)}\n")


# -- --execute -----------------------------------------------------------------------------------------------
def check_moves(view: ClusterView, moves: Iterable[PartitionMove]) -> None:
    """Every topic and partition exists and every replica is a live broker (before anything is changed)."""
    _refuse_missing_topics(view)
    for move in moves:
        if (move.topic, move.partition) not in view.partitions:
            count = len(view.topic_partitions(move.topic))
            fail(f"Partition {move.name} does not exist (topic '{move.topic}' has {count} partition(s)).")
    check_brokers_known(view, sorted({b for m in moves for b in m.replicas}))


def check_brokers_known(view: ClusterView, broker_ids: Iterable[int]) -> None:
    unknown = sorted(set(broker_ids) - set(view.brokers))
    if unknown:
        fail(f"Unknown broker id(s) {_ids(unknown)}: the live brokers are {_ids(sorted(view.brokers))}.")


async def _execute(admin: ReassignmentAdmin, moves: list[PartitionMove], throttle: int, log_dirs_throttle: int,
                   additional: bool, timeout_ms: int) -> None:
    view = await admin.load_metadata({m.topic for m in moves})
    check_moves(view, moves)
    for broker_id in sorted({b for m in moves for b in m.explicit_log_dirs()}):
        paths = [m.explicit_log_dirs()[broker_id] for m in moves if broker_id in m.explicit_log_dirs()]
        await admin.check_log_dir_moves(view.brokers[broker_id], paths)  # before anything starts moving
    ongoing = await admin.list_reassignments()
    if ongoing and not additional:
        fail("Cannot execute because there are partition reassignments in progress ("
             f"{', '.join(f'{t}-{p}' for t, p in sorted(ongoing))}); use --additional to start this one as well "
             "(or to change the throttle), or wait for them: `--list` shows them.")
    current = {(m.topic, m.partition): list(view.partitions[(m.topic, m.partition)].replicas) for m in moves}
    write_out(f"Current partition replica assignment\n\n{format_assignment(current)}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback\n")
    targets = {(m.topic, m.partition): list(m.replicas) for m in moves}
    if throttle >= 0 or log_dirs_throttle >= 0:
        await set_throttles(admin, current, targets, throttle, log_dirs_throttle, ongoing,
                            {b for m in moves for b in m.explicit_log_dirs()})
        write_out("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.\n")
        if throttle >= 0:
            write_out(f"The inter-broker throttle limit was set to {throttle} B/s\n")
        if log_dirs_throttle >= 0:
            write_out(f"The replica-alter-dir throttle limit was set to {log_dirs_throttle} B/s\n")
    results = await admin.alter_reassignments(dict(targets))
    failed = {tp: res for tp, res in results.items() if res[0]}
    started = sorted(set(results) - set(failed))
    if started:
        write_out(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for "
                  f"{','.join(f'{t}-{p}' for t, p in started)}\n")
    await _move_log_dirs(admin, moves, timeout_ms)
    if failed:
        write_out("Error reassigning partition(s):\n" + "".join(
            f"{t}-{p}: {message or error_name(code)} ({error_name(code)})\n" for (t, p), (code, message)
            in sorted(failed.items())))
        raise typer.Exit(1)


def throttled_replicas(current: dict[TopicPartition, list[int]], targets: dict[TopicPartition, list[int]],
                       ongoing: dict[TopicPartition, object] | None = None) -> dict[str, dict[str, str]]:
    """Topic -> {leader|follower.replication.throttled.replicas: "partition:broker,..."} for the moving
    partitions: their current replicas send (leader side), the replicas they gain receive (follower side)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for tp in sorted(targets):
        topic, partition = tp
        old, new = current.get(tp, []), targets[tp]
        if list(old) == list(new) and tp not in (ongoing or {}):
            continue
        leaders.setdefault(topic, []).extend(f"{partition}:{b}" for b in old)
        followers.setdefault(topic, []).extend(f"{partition}:{b}" for b in new if b not in old)
    out: dict[str, dict[str, str]] = {}
    for topic in sorted(set(leaders) | set(followers)):
        out[topic] = {LEADER_THROTTLED_REPLICAS: ",".join(leaders.get(topic, []))}
        if followers.get(topic):
            out[topic][FOLLOWER_THROTTLED_REPLICAS] = ",".join(followers[topic])
    return out


async def set_throttles(admin: ReassignmentAdmin, current: dict[TopicPartition, list[int]],
                        targets: dict[TopicPartition, list[int]], throttle: int, log_dirs_throttle: int,
                        ongoing: dict[TopicPartition, object] | None = None,
                        log_dir_brokers: Iterable[int] = ()) -> None:
    """Kafka's throttle configs for a reassignment: rates on every broker involved, replica lists per topic."""
    if throttle >= 0:
        brokers = sorted({b for tp in targets for b in [*current.get(tp, []), *targets[tp]]
                          if current.get(tp) != targets[tp] or tp in (ongoing or {})})
        for broker in brokers:
            await admin.alter_configs(BROKER_RESOURCE, str(broker), {BROKER_THROTTLES[0]: str(throttle),
                                                                     BROKER_THROTTLES[1]: str(throttle)})
        for topic, configs in throttled_replicas(current, targets, ongoing).items():
            await admin.alter_configs(TOPIC_RESOURCE, topic, configs)
    if log_dirs_throttle >= 0:
        for broker in sorted(set(log_dir_brokers)):
            await admin.alter_configs(BROKER_RESOURCE, str(broker), {BROKER_THROTTLES[2]: str(log_dirs_throttle)})


async def clear_throttles(admin: ReassignmentAdmin, topics: Iterable[str], announce: bool = True) -> None:
    """Remove the throttle configs from every live broker and from `topics` (Kafka's tool does the same)."""
    view = admin.view or await admin.load_metadata([])
    brokers = sorted(view.brokers)
    if announce:
        write_out(f"Clearing broker-level throttles on brokers {_ids(brokers)}\n")
    for broker in brokers:
        try:
            await admin.alter_configs(BROKER_RESOURCE, str(broker), {}, BROKER_THROTTLES)
        except CliError as exc:  # a broker's own configs change only through it: one that is down keeps them
            print_warning(f"{exc.message} The throttle of broker {broker} stays until this is run again while it "
                          "answers.")
    for topic in sorted(set(topics)):
        if announce:
            write_out(f"Clearing topic-level throttles on topic {topic}\n")
        await admin.alter_configs(TOPIC_RESOURCE, topic, {}, TOPIC_THROTTLES)


async def _move_log_dirs(admin: ReassignmentAdmin, moves: list[PartitionMove], timeout_ms: int) -> None:
    """Send AlterReplicaLogDirs for replicas given an explicit log dir; a replica that does not exist yet
    (REPLICA_NOT_AVAILABLE: still being created by the reassignment) is asked again until `timeout_ms`."""
    wanted: dict[int, dict[TopicPartition, str]] = {}
    for move in moves:
        for broker, path in move.explicit_log_dirs().items():
            wanted.setdefault(broker, {})[(move.topic, move.partition)] = path
    deadline = time.monotonic() + timeout_ms / 1000
    view = admin.view
    assert view is not None
    while wanted:
        for broker_id in sorted(wanted):
            errors = await admin.alter_replica_log_dirs(view.brokers[broker_id], wanted[broker_id])
            for tp, code in errors.items():
                if code == Errors.ReplicaNotAvailableError.errno and time.monotonic() < deadline:
                    continue
                if code:
                    fail(f"Broker {broker_id} refused to move {tp[0]}-{tp[1]} to "
                         f"{wanted[broker_id][tp]}: {error_name(code)}")
                del wanted[broker_id][tp]
            if not wanted[broker_id]:
                del wanted[broker_id]
        if wanted:
            await asyncio.sleep(0.5)
    return


# -- --verify ------------------------------------------------------------------------------------------------
async def _verify(admin: ReassignmentAdmin, moves: list[PartitionMove], preserve_throttles: bool) -> None:
    topics = {m.topic for m in moves}
    ongoing = await admin.list_reassignments([(m.topic, m.partition) for m in moves])
    view = await admin.load_metadata(topics)
    for _ in range(METADATA_SETTLE_TRIES):
        # A move the controller has just finished reaches the brokers' Metadata a moment later.
        if all((m.topic, m.partition) in ongoing or (m.topic, m.partition) not in view.partitions
               or view.partitions[(m.topic, m.partition)].replicas == m.replicas for m in moves):
            break
        await asyncio.sleep(0.5)
        view = await admin.load_metadata(topics)
    write_out("Status of partition reassignment:\n")
    done = True
    for move in moves:
        tp = (move.topic, move.partition)
        info = view.partitions.get(tp)
        if tp in ongoing:
            done = False
            write_out(f"Reassignment of partition {move.name} is still in progress.\n")
        elif info is not None and info.replicas == move.replicas:
            write_out(f"Reassignment of partition {move.name} is completed.\n")
        elif info is None:
            write_out(f"There is no active reassignment of partition {move.name}, and the partition does not "
                      "exist.\n")
        else:
            write_out(f"There is no active reassignment of partition {move.name}, but replica set is "
                      f"{_ids(info.replicas)} rather than {_ids(move.replicas)}.\n")
    done = await _verify_log_dirs(admin, moves) and done
    if done and not preserve_throttles:
        write_out("\n")
        await clear_throttles(admin, {m.topic for m in moves if (m.topic, m.partition) in view.partitions})


async def _verify_log_dirs(admin: ReassignmentAdmin, moves: list[PartitionMove]) -> bool:
    """Report replicas given an explicit log dir (DescribeLogDirs on their broker); True when all are there."""
    wanted: dict[int, dict[TopicPartition, str]] = {}
    for move in moves:
        for broker, path in move.explicit_log_dirs().items():
            wanted.setdefault(broker, {})[(move.topic, move.partition)] = path
    if not wanted:
        return True
    view = admin.view
    assert view is not None
    write_out("\nStatus of replica log dir movement:\n")
    done = True
    for broker_id, dirs in sorted(wanted.items()):
        broker = view.brokers.get(broker_id)
        found = await admin.replica_log_dirs(broker, dirs) if broker is not None else {}
        for (topic, partition), path in sorted(dirs.items()):
            name = f"{topic}-{partition} on broker {broker_id}"
            where = found.get((topic, partition), [])
            if (path, False) in where and len(where) == 1:
                write_out(f"Reassignment of replica {name} to log dir {path} is completed.\n")
            elif (path, True) in where:
                done = False
                write_out(f"Reassignment of replica {name} to log dir {path} is still in progress.\n")
            else:
                done = False
                current = ", ".join(d for d, future in where if not future) or "no log dir (no replica there)"
                write_out(f"Replica {name} is in {current}, not {path}, and is not moving there.\n")
    return done


# -- --cancel ------------------------------------------------------------------------------------------------
async def _cancel(admin: ReassignmentAdmin, moves: list[PartitionMove], preserve_throttles: bool) -> None:
    await admin.load_metadata({m.topic for m in moves})
    ongoing = await admin.list_reassignments([(m.topic, m.partition) for m in moves])
    active = [(m.topic, m.partition) for m in moves if (m.topic, m.partition) in ongoing]
    failed: dict[TopicPartition, tuple[int, str | None]] = {}
    if active:
        results = await admin.alter_reassignments({tp: None for tp in active})
        # A reassignment that finished meanwhile is not an error of the cancellation.
        failed = {tp: r for tp, r in results.items()
                  if r[0] and r[0] != Errors.NoReassignmentInProgressError.errno}
        cancelled = sorted(set(results) - set(failed))
        write_out(f"Successfully cancelled partition reassignment{'s' if len(cancelled) > 1 else ''} for: "
                  f"{','.join(f'{t}-{p}' for t, p in cancelled)}\n")
    else:
        write_out("None of the specified partition reassignments are active.\n")
    if not preserve_throttles:
        await clear_throttles(admin, {m.topic for m in moves}, announce=False)
    if failed:
        write_out("Error cancelling partition reassignment(s):\n" + "".join(
            f"{t}-{p}: {message or error_name(code)} ({error_name(code)})\n"
            for (t, p), (code, message) in sorted(failed.items())))
        raise typer.Exit(1)


# -- --list --------------------------------------------------------------------------------------------------
async def _list(admin: ReassignmentAdmin) -> None:
    ongoing = await admin.list_reassignments()
    if not ongoing:
        write_out("No partition reassignments found.\n")
        return
    write_out("Current partition reassignments:\n")
    for (topic, partition), state in sorted(ongoing.items()):
        write_out(f"{topic}-{partition}: replicas: {_ids(state.replicas)}. adding: {_ids(state.adding)}. "
                  f"removing: {_ids(state.removing)}.\n")


def _refuse_missing_topics(view: ClusterView) -> None:
    if view.missing_topics:
        names = ", ".join(f"'{t}'" for t in sorted(view.missing_topics))
        fail(f"Topic{'s' if len(view.missing_topics) > 1 else ''} {names} "
             f"do{'' if len(view.missing_topics) > 1 else 'es'} not exist.")


def _ids(ids: Iterable[int]) -> str:
    return ",".join(map(str, ids))
