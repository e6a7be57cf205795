"""`strom consumer-groups`: list, describe, delete and reset consumer groups
(like kafka-consumer-groups.sh), through confluent-kafka's AdminClient.

Output columns follow Kafka's tool so scripts written for it keep working:
describe prints, per partition, CURRENT-OFFSET, LOG-END-OFFSET, LAG, CONSUMER-ID,
HOST and CLIENT-ID; --members and --state print the member and group views. For a
consumer-protocol group (KIP-848) --state adds GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH and
--members --verbose each member's current and target epoch and assignment, as Kafka 4's tool
does (read with ConsumerGroupDescribe from the coordinator); --list --type shows each group's type.
Resetting offsets only works on an inactive (Empty) group and shows the plan
with --dry-run (the default) before --execute applies it.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from strom.cli.common import (
    BootstrapOption,
    CommandConfigOption,
    admin_client,
    cli_errors,
    client_security,
    describe_kafka_error,
    fail,
    write_out,
)

_MISSING = "-"
_COORDINATOR_BUSY = ("COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR")


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime: YYYY-MM-DDTHH:mm:SS[.sss][zone]; no zone means local time. Returns ms."""
    raw = text.strip()
    if raw.endswith("Z"):
        raw = raw[:-1] + "+00:00"
    # Kafka accepts +hhmm as well as +hh:mm.
    raw = re.sub(r"([+-]\d{2})(\d{2})$", r"\1:\2", raw)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        fail(f"Invalid --to-datetime '{text}': expected e.g. 2024-01-31T12:00:00.000 or 2024-01-31T12:00:00Z.")
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, like Kafka's tool
    return int(moment.astimezone(UTC).timestamp() * 1000)


def parse_topic_arg(text: str) -> tuple[str, set[int] | None]:
    """`topic` or `topic:0,2,5` as Kafka's --topic accepts for resets."""
    name, sep, parts = text.partition(":")
    if not sep:
        return name, None
    try:
        return name, {int(p) for p in parts.split(",") if p.strip()}
    except ValueError:
        fail(f"Invalid --topic '{text}': expected topic or topic:0,1,2.")


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [" ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def _state_name(state: Any) -> str:
    """ConsumerGroupState.STABLE -> Stable, matching Kafka's output."""
    name = getattr(state, "name", str(state)).rsplit(".", 1)[-1]
    return {"PREPARING_REBALANCING": "PreparingRebalance", "PREPARING_REBALANCE": "PreparingRebalance",
            "COMPLETING_REBALANCING": "CompletingRebalance", "COMPLETING_REBALANCE": "CompletingRebalance",
            "UNKNOWN": "Unknown"}.get(name, name.capitalize())


def _is_consumer_protocol(desc: Any) -> bool:
    return getattr(getattr(desc, "type", None), "name", "") == "CONSUMER"


def _assignment_text(assignment: Any) -> str:
    """topic(0,1),other(2) from a ConsumerGroupDescribe assignment."""
    parts = [f"{tp.topic_name}({','.join(map(str, sorted(tp.partitions)))})"
             for tp in sorted(assignment.topic_partitions, key=lambda tp: tp.topic_name) if tp.partitions]
    return ",".join(parts) or _MISSING


class GroupTool:
    def __init__(self, admin: Any, timeout: float, security: Any = None) -> None:
        self.admin = admin
        self.timeout = timeout
        self.security = security

    # -- queries -------------------------------------------------------------------
    def list_groups(self) -> list[str]:
        return sorted(self.list_groups_with_type())

    def list_groups_with_type(self) -> dict[str, str]:
        """Group id -> Classic / Consumer."""
        result = self.admin.list_consumer_groups(request_timeout=self.timeout).result()
        return {g.group_id: _state_name(getattr(g, "type", None) or "UNKNOWN") for g in result.valid}

    def consumer_group_describe(self, group: str, desc: Any) -> Any:
        """ConsumerGroupDescribe of a consumer-protocol group, asked of its coordinator."""
        from strom.cli.common import connect_timeout
        from strom.client.broker_client import request_once
        from strom.protocol.group_messages import ConsumerGroupDescribeRequest

        coord = desc.coordinator
        described = request_once(
            coord.host, coord.port, ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
            1, client_id="strom-consumer-groups", connect_timeout_s=connect_timeout(), security=self.security,
            request_timeout_ms=int(self.timeout * 1000)).groups[0]
        if described.error_code:
            fail(f"Could not describe group '{group}': {described.error_message or described.error_code}")
        return described

    def describe(self, group: str) -> Any:
        from confluent_kafka import KafkaException

        # A coordinator that is still loading its offsets partition (right after it became leader,
        # e.g. the first group request of a new cluster) answers with a retriable error: wait it out.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self.admin.describe_consumer_groups([group], request_timeout=self.timeout)[group].result()
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                name = err.name() if hasattr(err, "name") else ""
                if name not in _COORDINATOR_BUSY or time.monotonic() > deadline:
                    fail(f"Could not describe group '{group}': {describe_kafka_error(exc)}")
            time.sleep(0.5)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                         request_timeout=self.timeout)
        result = futures[group].result()
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def offsets(self, partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        if not partitions:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                          request_timeout=self.timeout)
        out = {}
        for tp, fut in futures.items():
            out[(tp.topic, tp.partition)] = fut.result().offset
        return out

    def topic_partitions(self, topic: str) -> list[int]:
        md = self.admin.list_topics(topic, timeout=self.timeout)
        info = md.topics.get(topic)
        if info is None or not info.partitions:
            fail(f"Topic '{topic}' does not exist.")
        return sorted(info.partitions)

    # -- views ---------------------------------------------------------------------
    def print_offsets(self, group: str) -> None:
        from confluent_kafka.admin import OffsetSpec

        desc = self.describe(group)
        committed = self.committed(group)
        if _state_name(desc.state) == "Dead" and not committed:
            fail(f"Consumer group '{group}' does not exist.")
        owner: dict[tuple[str, int], Any] = {}
        for m in desc.members:
            for tp in m.assignment.topic_partitions:
                owner[(tp.topic, tp.partition)] = m
        partitions = sorted(set(committed) | set(owner))
        ends = self.offsets(partitions, OffsetSpec.latest())
        if not desc.members:
            write_out(f"\nConsumer group '{group}' has no active members.\n")
        rows = []
        for tp in partitions:
            cur = committed.get(tp)
            end = ends.get(tp, -1)
            lag = str(max(end - cur, 0)) if cur is not None and end >= 0 else _MISSING
            m = owner.get(tp)
            rows.append([group, tp[0], str(tp[1]), _MISSING if cur is None else str(cur),
                         _MISSING if end < 0 else str(end), lag,
                         m.member_id if m else _MISSING, m.host if m else _MISSING, m.client_id if m else _MISSING])
        if not partitions:
            return
        write_out("\n" + _table(rows, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                       "CONSUMER-ID", "HOST", "CLIENT-ID"]))

    def require(self, group: str) -> Any:
        """The group's description; a group the coordinator does not know (Dead, nothing committed) is an error."""
        desc = self.describe(group)
        if _state_name(desc.state) == "Dead" and not self.committed(group):
            fail(f"Consumer group '{group}' does not exist.")
        return desc

    def print_members(self, group: str, verbose: bool) -> None:
        desc = self.require(group)
        if not desc.members:
            write_out(f"\nConsumer group '{group}' has no active members.\n")
            return
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        if verbose and _is_consumer_protocol(desc):
            self._print_consumer_members(group, desc, headers)
            return
        if verbose:
            headers.append("ASSIGNMENT")
        rows = []
        for m in desc.members:
            tps = m.assignment.topic_partitions
            row = [group, m.member_id, m.host, m.client_id, str(len(tps))]
            if verbose:
                by_topic: dict[str, list[int]] = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                row.append(",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
                           or _MISSING)
            rows.append(row)
        write_out("\n" + _table(rows, headers))

    def _print_consumer_members(self, group: str, desc: Any, headers: list[str]) -> None:
        described = self.consumer_group_describe(group, desc)
        rows = []
        for m in described.members:
            current = sum(len(tp.partitions) for tp in m.assignment.topic_partitions)
            target_epoch = described.assignment_epoch
            rows.append([group, m.member_id, m.client_host, m.client_id, str(current), str(m.member_epoch),
                         _assignment_text(m.assignment), str(target_epoch), _assignment_text(m.target_assignment)])
        write_out("\n" + _table(rows, [*headers, "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                        "TARGET-ASSIGNMENT"]))

    def print_state(self, group: str) -> None:
        desc = self.require(group)
        coord = desc.coordinator
        coordinator = f"{coord.host}:{coord.port} ({coord.id})" if coord is not None else _MISSING
        if _is_consumer_protocol(desc):
            described = self.consumer_group_describe(group, desc)
            rows = [[group, coordinator, described.assignor_name, described.group_state, str(described.group_epoch),
                     str(described.assignment_epoch), str(len(described.members))]]
            write_out("\n" + _table(rows, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                            "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]))
            return
        rows = [[group, coordinator, desc.partition_assignor or "", _state_name(desc.state), str(len(desc.members))]]
        write_out("\n" + _table(rows, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]))

    # -- changes -------------------------------------------------------------------
    def delete(self, groups: list[str]) -> None:
        from confluent_kafka import KafkaException

        futures = self.admin.delete_consumer_groups(groups, request_timeout=self.timeout)
        failed = {}
        for g, fut in futures.items():
            try:
                fut.result()
            except KafkaException as exc:
                failed[g] = describe_kafka_error(exc)
        ok = [g for g in groups if g not in failed]
        if ok:
            write_out("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok)
                      + ") was successful.\n")
        if failed:
            write_out("Deletion of some consumer groups failed:\n")
            for g, why in failed.items():
                write_out(f"* Group '{g}' could not be deleted due to: {why}\n")
            raise typer.Exit(1)

    def plan_reset(self, group: str, topics: list[tuple[str, set[int] | None]], all_topics: bool,
                   target: tuple[str, int | None]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        committed = self.committed(group)
        partitions: list[tuple[str, int]] = []
        if all_topics:
            partitions = sorted(committed)
        for name, wanted in topics:
            for p in self.topic_partitions(name):
                if wanted is None or p in wanted:
                    partitions.append((name, p))
        partitions = sorted(set(partitions))
        if not partitions:
            fail("No partitions to reset: name them with --topic, or use --all-topics for a group with offsets.")
        earliest = self.offsets(partitions, OffsetSpec.earliest())
        latest = self.offsets(partitions, OffsetSpec.latest())

        def clamp(tp: tuple[str, int], off: int) -> int:
            return min(max(off, earliest[tp]), latest[tp])

        kind, value = target
        plan: dict[tuple[str, int], int] = {}
        if kind == "datetime":
            assert value is not None
            found = self.offsets(partitions, OffsetSpec.for_timestamp(value))
            for tp in partitions:
                off = found.get(tp, -1)
                plan[tp] = off if off is not None and off >= 0 else latest[tp]
            return plan
        for tp in partitions:
            current = committed.get(tp)
            if kind == "earliest":
                plan[tp] = earliest[tp]
            elif kind == "latest":
                plan[tp] = latest[tp]
            elif kind == "current":
                plan[tp] = current if current is not None else latest[tp]
            elif kind == "offset":
                assert value is not None
                plan[tp] = clamp(tp, value)
            elif kind == "shift":
                assert value is not None
                base = current if current is not None else latest[tp]
                plan[tp] = clamp(tp, base + value)
        return plan

    def apply_reset(self, group: str, plan: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, off) for (t, p), off in sorted(plan.items())])
        result = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout)[group].result()
        errors = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if errors:
            fail(f"Resetting offsets of group '{group}' failed: "
                 + ", ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in errors))


def _reset_target(to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None,
                  to_datetime: str | None, shift_by: int | None) -> tuple[str, int | None]:
    chosen = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-current", to_current), ("--to-offset", to_offset is not None),
                                    ("--to-datetime", to_datetime is not None), ("--shift-by", shift_by is not None))
              if on]
    if len(chosen) != 1:
        fail("--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, --to-offset, "
             f"--to-datetime, --shift-by (got {', '.join(chosen) or 'none'}).")
    if to_earliest:
        return "earliest", None
    if to_latest:
        return "latest", None
    if to_current:
        return "current", None
    if to_offset is not None:
        return "offset", to_offset
    if to_datetime is not None:
        return "datetime", parse_datetime(to_datetime)
    return "shift", shift_by


def consumer_groups(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    list_: Annotated[bool, typer.Option("--list", help="List all consumer groups.")] = False,
    show_type: Annotated[bool, typer.Option("--type", help="With --list: show each group's type (Classic, Consumer).")
                         ] = False,
    describe: Annotated[bool, typer.Option("--describe", help="Describe consumer groups and their lag.")] = False,
    delete: Annotated[bool, typer.Option("--delete", help="Delete empty consumer groups and their offsets.")] = False,
    reset_offsets: Annotated[bool, typer.Option("--reset-offsets", help="Reset the offsets of an inactive group.")
                             ] = False,
    group: Annotated[list[str] | None, typer.Option("--group", help="Consumer group (repeatable).")] = None,
    all_groups: Annotated[bool, typer.Option("--all-groups", help="Apply to every group.")] = False,
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Topic, or topic:0,1 (resets).")] = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Reset every topic the group has offsets for.")
                          ] = False,
    members: Annotated[bool, typer.Option("--members", help="Describe the members instead of offsets.")] = False,
    state: Annotated[bool, typer.Option("--state", help="Describe the group state.")] = False,
    offsets: Annotated[bool, typer.Option("--offsets", help="Describe offsets and lag (the default).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="With --members: show each member's partitions.")
                       ] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the log start offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the log end offset.")] = False,
    to_current: Annotated[bool, typer.Option("--to-current", help="Keep the committed offsets.")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="Reset to this offset (clamped to the log).")
                         ] = None,
    to_datetime: Annotated[str | None, typer.Option("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss[zone]")] = None,
    shift_by: Annotated[int | None, typer.Option("--shift-by", help="Move the committed offsets by N (may be < 0).")
                        ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show the new offsets (default).")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the new offsets.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the broker.")] = 30.0,
    command_config: CommandConfigOption = None,
) -> None:
    """List, describe, delete consumer groups and reset their offsets (like kafka-consumer-groups.sh)."""
    with cli_errors():
        actions = [a for a, on in (("--list", list_), ("--describe", describe), ("--delete", delete),
                                   ("--reset-offsets", reset_offsets)) if on]
        if len(actions) != 1:
            fail("Exactly one of --list, --describe, --delete, --reset-offsets is required.")
        if dry_run and execute:
            fail("--dry-run and --execute are mutually exclusive.")
        tool = GroupTool(admin_client(bootstrap_server, command_config), timeout, client_security(command_config))
        if list_ and show_type:
            typed = tool.list_groups_with_type()
            write_out(_table([[g, typed[g]] for g in sorted(typed)], ["GROUP", "TYPE"]))
            return
        if list_:
            for g in tool.list_groups():
                write_out(g + "\n")
            return
        groups = tool.list_groups() if all_groups else list(dict.fromkeys(group or []))
        if not groups:
            fail("Name a group with --group (or use --all-groups).")
        if describe:
            for g in groups:
                if members:
                    tool.print_members(g, verbose)
                elif state:
                    tool.print_state(g)
                else:
                    tool.print_offsets(g)
            return
        if delete:
            tool.delete(groups)
            return
        target = _reset_target(to_earliest, to_latest, to_current, to_offset, to_datetime, shift_by)
        topics = [parse_topic_arg(t) for t in topic or []]
        if not topics and not all_topics:
            fail("--reset-offsets needs --topic or --all-topics.")
        for g in groups:
            current_state = _state_name(tool.describe(g).state)
            if current_state not in ("Empty", "Dead", "Unknown"):
                fail(f"Assignments can only be reset if the group '{g}' is inactive, but the current state is "
                     f"{current_state}.")
            plan = tool.plan_reset(g, topics, all_topics, target)
            if execute:
                tool.apply_reset(g, plan)
            rows = [[g, t, str(p), str(off)] for (t, p), off in sorted(plan.items())]
            write_out("\n" + _table(rows, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
        if not execute:
            write_out("\n(dry run: nothing changed; add --execute to apply)\n")
