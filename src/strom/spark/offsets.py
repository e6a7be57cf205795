"""Topic-partition discovery and offset resolution, run on the Spark driver.

Offsets travel through Spark's checkpoint as JSON ``{topic: {partition: offset}}`` — the
same shape Spark's Kafka source writes — so a checkpointed query can be inspected by eye.
Only the metadata and ListOffsets APIs are used: Strom has no consumer groups in this
phase, and Spark's checkpoint, not the broker, is the source of truth for progress.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from strom.spark.errors import StromUserError
from strom.spark.options import SourceOptions, StromOptionError
from strom.spark.retry import LEADER_CHANGE_TIMEOUT_S, attempts, is_leader_change, refresh_metadata

log = logging.getLogger("strom.spark")

TP = tuple[str, int]
PartitionOffsets = dict[TP, int]

EARLIEST = -2
LATEST = -1

# Asking again before calling a subscribed topic missing, as Spark's Kafka source does
# (fetchOffset.numRetries, fetchOffset.retryIntervalMs).
MISSING_TOPIC_RETRIES = 3
MISSING_TOPIC_RETRY_INTERVAL_S = 1.0


class StromDataLossError(StromUserError, RuntimeError):
    """Raised when offsets were deleted or a topic vanished and failOnDataLoss is true."""


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Checkpoint form; partitions are strings because JSON object keys must be."""
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(off)
    return out


def from_json(data: Mapping[str, Mapping[str, Any]] | None) -> PartitionOffsets:
    out: PartitionOffsets = {}
    for topic, parts in (data or {}).items():
        for part, off in parts.items():
            out[(topic, int(part))] = int(off)
    return out


def report_data_loss(fail: bool, message: str) -> None:
    """Spark's rule: fail the query, or log and carry on, depending on failOnDataLoss."""
    if fail:
        raise StromDataLossError(
            message + " Some data may have been lost because it is no longer available in Strom "
            "(deleted by retention or the topic was deleted). If you want your query to continue, "
            "set the source option 'failOnDataLoss' to 'false'."
        )
    log.warning("%s Skipping ahead (failOnDataLoss=false).", message)


class OffsetResolver:
    """Driver-side metadata client. Holds an AdminClient, created lazily and never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Any = None
        self._reported_missing: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None
        return state

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            conf = {k: v for k, v in self.options.client.items() if not _consumer_only(k)}
            self._admin = AdminClient(conf)
        return self._admin

    def close(self) -> None:
        self._admin = None

    # -- discovery ---------------------------------------------------------------------

    def topic_partitions(self, timeout: float = 15.0) -> dict[str, int]:
        """Current partition count per topic, for every topic that exists."""
        md = self.admin.list_topics(timeout=timeout)
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def discover(self) -> set[TP]:
        """The partitions the subscription covers right now (new topics/partitions included)."""
        opts = self.options
        if opts.strategy == "assign":
            return {(t, p) for t, parts in opts.assign.items() for p in parts}
        existing = self.topic_partitions()
        if opts.strategy == "subscribe":
            for _ in range(MISSING_TOPIC_RETRIES):
                if all(t in existing for t in opts.topics) or not opts.fail_on_data_loss:
                    break
                # A topic created a moment ago may not have reached the broker that answered yet.
                time.sleep(MISSING_TOPIC_RETRY_INTERVAL_S)
                existing = self.topic_partitions()
            self._check_subscribed(existing)
            names: Iterable[str] = [t for t in opts.topics if t in existing]
        else:
            rx = re.compile(opts.pattern or "")
            names = [t for t in existing if not t.startswith("__") and rx.fullmatch(t)]
        return {(t, p) for t in names for p in range(existing[t])}

    def _check_subscribed(self, existing: Mapping[str, int]) -> None:
        """A subscribed topic that does not exist fails the query, as it does with Spark's Kafka source
        (its AdminClient-based offset reader, the default since Spark 3.4); with failOnDataLoss=false
        the source reads nothing from it until it is created, and says so once per topic."""
        from strom.spark.errors import StromTopicNotFoundError

        missing = [t for t in self.options.topics if t not in existing]
        if not missing:
            return
        names = ", ".join(f"'{t}'" for t in missing)
        if self.options.fail_on_data_loss:
            raise StromTopicNotFoundError(
                f"Subscribed topic {names} (option 'subscribe') does not exist on "
                f"{self.options.client.get('bootstrap.servers')}. Check the name or create the topic; "
                "to read it once it appears instead, set the source option 'failOnDataLoss' to 'false'."
            )
        new = [t for t in missing if t not in self._reported_missing]
        if new:
            self._reported_missing.update(new)
            log.warning("Subscribed topic %s does not exist yet; reading nothing from it until it is "
                        "created (failOnDataLoss=false).", ", ".join(f"'{t}'" for t in new))

    # -- ListOffsets -------------------------------------------------------------------

    def _list(self, specs: Mapping[TP, Any], *, no_match_ok: bool = False) -> PartitionOffsets:
        """ListOffsets for every partition, riding out a leader change (see strom.spark.retry).

        While a killed leader is being replaced, librdkafka's AdminClient can answer a
        partition with offset -1001 (OFFSET_INVALID) and no error, instead of raising. A real
        earliest/latest offset is never negative and a timestamp look-up that matches nothing
        gives -1 (``no_match_ok``), so any other negative answer is retried after a metadata
        refresh like an error; taken as an offset it looked like offsets going backwards and
        failed the query with a false data-loss error.
        """
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition

        req = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        kwargs: dict[str, Any] = {"request_timeout": 30}
        if self.options.read_committed:
            kwargs["isolation_level"] = IsolationLevel.READ_COMMITTED
        last: Exception | str | None = None
        for attempt in attempts():
            try:
                futures = self.admin.list_offsets(req, **kwargs)
                found = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            except Exception as exc:
                # A topic created a moment ago may be unknown for a few tries; other errors
                # that a leader change does not explain are not worth a minute of retries.
                if not is_leader_change(exc) and attempt >= 5:
                    raise RuntimeError(f"ListOffsets failed for {sorted(specs)}: {exc}") from exc
                last = exc
            else:
                invalid = {tp: off for tp, off in found.items() if off < 0 and not (no_match_ok and off == -1)}
                if not invalid:
                    return found
                last = f"no valid offset for {sorted(invalid)} (got {invalid})"
            refresh_metadata(self.admin)
        raise RuntimeError(
            f"ListOffsets failed for {sorted(specs)} after {LEADER_CHANGE_TIMEOUT_S:g} s of retries: {last}"
        )

    def earliest(self, tps: Iterable[TP]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec

        return self._list({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TP]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec

        return self._list({tp: OffsetSpec.latest() for tp in tps})

    def for_times(self, times: Mapping[TP, int], *, strategy: str, name: str) -> PartitionOffsets:
        """First offset whose timestamp is >= the given one; no match means 'latest' or an error."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in times.items()}, no_match_ok=True)
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            if strategy == "error":
                raise StromOptionError(
                    f"No offset matched the timestamp given in '{name}' for {sorted(missing)}. "
                    "Set 'startingOffsetsByTimestampStrategy' to 'latest' to start from the end instead."
                )
            found.update(self.latest(missing))
        return found

    # -- option resolution -------------------------------------------------------------

    def resolve(self, tps: set[TP], *, ending: bool) -> PartitionOffsets:
        """Concrete offsets for startingOffsets*/endingOffsets* over the given partitions."""
        opts = self.options
        if ending:
            ts, by_ts, spec, default = (
                opts.ending_timestamp,
                opts.ending_by_timestamp,
                opts.ending,
                LATEST,
            )
        else:
            ts, by_ts, spec, default = (
                opts.starting_timestamp,
                opts.starting_by_timestamp,
                opts.starting,
                EARLIEST,
            )
        which = "ending" if ending else "starting"
        if ts is not None:
            return self.for_times({tp: ts for tp in tps}, strategy=opts.timestamp_strategy, name=f"{which}Timestamp")
        if by_ts is not None:
            wanted = _parse_by_timestamp(by_ts, f"{which}OffsetsByTimestamp")
            times = {tp: wanted[tp] for tp in tps if tp in wanted}
            out = self.for_times(times, strategy=opts.timestamp_strategy, name=f"{which}OffsetsByTimestamp")
            rest = [tp for tp in tps if tp not in wanted]
            out.update(self.latest(rest) if default == LATEST else self.earliest(rest))
            return out
        low = spec.lower()
        if low == "earliest":
            return self.earliest(tps)
        if low == "latest":
            return self.latest(tps)
        import json

        given = from_json(json.loads(spec))
        want: dict[TP, int] = {tp: given.get(tp, default) for tp in tps}
        out = {tp: off for tp, off in want.items() if off >= 0}
        out.update(self.earliest([tp for tp, off in want.items() if off == EARLIEST]))
        out.update(self.latest([tp for tp, off in want.items() if off == LATEST]))
        return out


def _parse_by_timestamp(text: str, name: str) -> dict[TP, int]:
    import json

    try:
        return from_json(json.loads(text))
    except (ValueError, AttributeError, TypeError):
        raise StromOptionError(
            f"Option '{name}' must be JSON like {{\"topicA\":{{\"0\":1700000000000}}}}, got {text!r}"
        ) from None


def _consumer_only(key: str) -> bool:
    return key in ("isolation.level", "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes")


def split_ranges(
    ranges: list[tuple[str, int, int, int]], min_partitions: int | None
) -> list[tuple[str, int, int, int]]:
    """Split (topic, partition, start, end) ranges so there are at least ``min_partitions`` tasks.

    Each range gets a share of the tasks proportional to its size (at least one), so a
    single huge partition no longer pins a whole query to one core.
    """
    ranges = [r for r in ranges if r[3] > r[2]]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(end - start for _, _, start, end in ranges)
    out: list[tuple[str, int, int, int]] = []
    for topic, part, start, end in ranges:
        size = end - start
        parts = max(1, min(size, round(size / total * min_partitions)))
        step, extra = divmod(size, parts)
        pos = start
        for i in range(parts):
            nxt = pos + step + (1 if i < extra else 0)
            out.append((topic, part, pos, nxt))
            pos = nxt
    return out


def rate_limit(
    start: Mapping[TP, int], latest: Mapping[TP, int], max_rows: int
) -> PartitionOffsets:
    """Admit at most ``max_rows`` offsets, shared across partitions in proportion to their lag.

    Shares are floored and the remainder goes to the largest fractional parts, so the total
    admitted is exactly ``min(max_rows, total lag)`` — the batch sizes a user can predict.
    """
    lag = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: lag[tp] * max_rows / total for tp in lag}
    take = {tp: int(s) for tp, s in shares.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(lag, key=lambda t: (-(shares[t] - take[t]), t))[:left]:
        take[tp] += 1
    return {tp: start.get(tp, 0) + min(take[tp], lag[tp]) for tp in latest}
