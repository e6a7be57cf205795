"""The `strom` data source: batch reader, streaming reader and the shared read path.

Where the code runs (see docs/spark.md): offset planning (``initialOffset``,
``latestOffset``, ``partitions``) runs on the driver; ``read()`` runs in executor tasks,
one or more per topic-partition range (strom.spark.range_reader), so data never funnels
through the driver.
Readers are pickled to the tasks, so clients are created lazily and cached per Python
worker process (Spark reuses workers across tasks and micro-batches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strom.spark.arrow import source_schema
from strom.spark.client import check_reachable
from strom.spark.errors import StromUserError, hide_traceback, user_facing
from strom.spark.offsets import (
    OffsetResolver,
    PartitionOffsets,
    from_json,
    rate_limit,
    report_data_loss,
    split_ranges,
    to_json,
)
from strom.spark.options import (
    SinkOptions,
    SourceOptions,
    StromOptionError,
    parse_sink_options,
    parse_source_options,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("strom.spark")


class OffsetRange(InputPartition):
    """One Spark task: offsets [start, end) of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


# ---------------------------------------------------------------------------------------
# Read path (executor side)
# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# Batch reader
# ---------------------------------------------------------------------------------------


def _plan(opts: SourceOptions, start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    ranges = []
    for tp, stop in sorted(end.items()):
        begin = start.get(tp, 0)
        if stop > begin:
            ranges.append((tp[0], tp[1], begin, stop))
    return [OffsetRange(*r) for r in split_ranges(ranges, opts.min_partitions)]


class StromBatchReader(DataSourceReader):
    """``spark.read.format("strom")``: offsets are resolved once at planning time."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    @user_facing
    def partitions(self) -> list[InputPartition]:
        resolver = OffsetResolver(self.options)
        try:
            tps = resolver.discover()
            start = resolver.resolve(tps, ending=False)
            end = resolver.resolve(tps, ending=True)
        finally:
            resolver.close()
        for tp in tps:
            if end[tp] < start[tp]:
                raise StromOptionError(
                    f"Ending offset {end[tp]} of {tp[0]}-{tp[1]} is before its starting offset {start[tp]}."
                )
        return list(_plan(self.options, start, end))

    @user_facing
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # Spark reads one dummy partition when none were planned
            from strom.spark.range_reader import read_range

            yield from read_range(self.options, partition)


# ---------------------------------------------------------------------------------------
# Streaming reader
# ---------------------------------------------------------------------------------------


# Spark's fetchOffset.numRetries / fetchOffset.retryIntervalMs defaults.
BACKWARDS_RETRIES = 3
BACKWARDS_RETRY_INTERVAL_S = 1.0


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("strom")`` with admission control and Trigger.AvailableNow.

    The instance Spark keeps on the driver lives for the whole query run, so it holds the
    metadata client and the trigger-delay clock. Progress lives only in Spark's checkpoint.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.resolver = OffsetResolver(options)
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None
        self._last_trigger = time.monotonic()

    @user_facing
    def initialOffset(self) -> dict:
        tps = self.resolver.discover()
        return to_json(self.resolver.resolve(tps, ending=False))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    @user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.resolver.latest(self.resolver.discover())

    def _current_latest(self, start: PartitionOffsets) -> PartitionOffsets:
        if self._target is not None:
            latest = dict(self._target)
            for tp, off in start.items():
                latest.setdefault(tp, off)
            return latest
        tps = self.resolver.discover()
        latest = self.resolver.latest(tps)
        for _ in range(BACKWARDS_RETRIES):
            # Right after a leader change the new leader's high watermark can trail the one the
            # old leader reported until its followers fetch again; Spark's Kafka source re-asks
            # too (fetchOffset.numRetries) before calling offsets that went backwards data loss.
            if all(off >= start.get(tp, 0) for tp, off in latest.items()):
                break
            time.sleep(BACKWARDS_RETRY_INTERVAL_S)
            latest = self.resolver.latest(tps)
        for tp in sorted(set(start) - set(latest)):
            report_data_loss(self.options.fail_on_data_loss, f"Topic-partition {tp[0]}-{tp[1]} vanished.")
        for tp, off in sorted(latest.items()):
            if off < start.get(tp, 0):
                report_data_loss(
                    self.options.fail_on_data_loss,
                    f"Offsets of {tp[0]}-{tp[1]} went backwards from {start[tp]} to {off} "
                    "(was the topic deleted and recreated?).",
                )
        return latest

    @user_facing
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        latest = self._current_latest(begin)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return to_json(latest)
        opts = self.options
        if opts.min_offsets_per_trigger and self._target is None:
            lag = sum(max(0, off - begin.get(tp, 0)) for tp, off in latest.items())
            waited_ms = (time.monotonic() - self._last_trigger) * 1000
            if lag < opts.min_offsets_per_trigger and waited_ms < opts.max_trigger_delay_ms:
                return start
        self._last_trigger = time.monotonic()
        if isinstance(limit, ReadMaxRows):
            return to_json(rate_limit(begin, latest, limit.max_rows))
        return to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest) if self._latest is not None else None

    @user_facing
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(_plan(self.options, from_json(start), from_json(end)))

    @user_facing
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # Spark reads one dummy partition when none were planned
            from strom.spark.range_reader import read_range

            yield from read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress is Spark's checkpoint, not broker-side group offsets."""

    def stop(self) -> None:
        self.resolver.close()


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stands in for a stream reader whose options were refused, and fails its first call.

    PySpark's streaming source runner calls ``reader.stop()`` in a ``finally`` around the
    reader's creation, so an error raised by ``streamReader()`` itself is replaced by an
    ``UnboundLocalError`` about ``reader``; raised from the first call it reaches the user.
    """

    def __init__(self, error: StromUserError) -> None:
        self.error = error

    def _fail(self, *args: object, **kwargs: object) -> Any:
        hide_traceback()
        raise self.error.with_traceback(None)

    initialOffset = latestOffset = partitions = read = commit = _fail
    prepareForTriggerAvailableNow = getDefaultReadLimit = reportLatestOffset = _fail

    def stop(self) -> None:
        """Nothing was opened."""


# ---------------------------------------------------------------------------------------
# The data source
# ---------------------------------------------------------------------------------------


class StromDataSource(DataSource):
    """Format ``strom``: Spark's Kafka source and sink semantics over Strom topics."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        raw = {str(k).lower(): str(v) for k, v in self.options.items()}
        return source_schema(raw.get("includeheaders", "false").strip().lower() == "true")

    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(_reachable(parse_source_options(self.options, streaming=False)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return StromStreamReader(_reachable(parse_source_options(self.options, streaming=True)))
        except StromUserError as exc:
            return RefusedStreamReader(exc)

    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.sink import StromBatchWriter

        if overwrite:
            raise StromOptionError(
                "Save mode 'overwrite' is not supported by the strom sink: a topic is an append-only "
                "log. Use mode('append'), or delete and recreate the topic first."
            )
        opts = _reachable(parse_sink_options(self.options))
        writer = StromBatchWriter(opts, schema)
        _prepare_topic(opts)
        return writer

    @user_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.sink import StromStreamWriter

        opts = _reachable(parse_sink_options(self.options))
        writer = StromStreamWriter(opts, schema)
        _prepare_topic(opts)
        return writer


Opts = TypeVar("Opts", SourceOptions, SinkOptions)


def _reachable(opts: Opts) -> Opts:
    """Say at once, with the address, when no bootstrap broker answers (strom.spark.client)."""
    check_reachable(opts.client["bootstrap.servers"])
    return opts


def _prepare_topic(opts: SinkOptions) -> None:
    from strom.spark.sink import prepare_topic

    prepare_topic(opts)
