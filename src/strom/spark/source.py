"""The `strom` data source: batch reader, streaming reader and the shared read path.

Where the code runs (see docs/spark.md): offset planning (``initialOffset``,
``latestOffset``, ``partitions``) runs on the driver; ``read()`` runs in executor tasks,
one or more per topic-partition range, so data never funnels through the driver.
Readers are pickled to the tasks, so clients are created lazily and cached per Python
worker process (Spark reuses workers across tasks and micro-batches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
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

from strom.protocol import replica_fetch
from strom.protocol.api_keys import ApiKey
from strom.spark.arrow import arrow_schema, constant_int32, constant_string, source_schema
from strom.spark.batch_decode import decode_run, select_batches
from strom.spark.client import RETRIABLE, KafkaProtocolError, task_client
from strom.spark.offsets import (
    OffsetResolver,
    PartitionOffsets,
    from_json,
    rate_limit,
    report_data_loss,
    split_ranges,
    to_json,
)
from strom.spark.options import SourceOptions, StromOptionError, parse_sink_options, parse_source_options
from strom.spark.retry import LEADER_CHANGE_TIMEOUT_S, attempts

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

# Fetch sizes: a task reads one partition, so one answer can fill a whole Arrow batch.
FETCH_MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 8 * 1024 * 1024
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3


class _RangeReader:
    """Fetches one partition's records [start, end) as raw batches and decodes them to Arrow.

    The next Fetch is sent before the current answer is decoded (its offset is known from the
    batch headers), so the broker's sendfile and the decoding overlap.
    """

    def __init__(self, opts: SourceOptions, rng: OffsetRange) -> None:
        self.opts = opts
        self.topic, self.partition = rng.topic, rng.partition
        self.client = task_client(opts.client)
        self.schema = arrow_schema(opts.include_headers)
        self.header_type = self.schema.field("headers").type if opts.include_headers else None
        self.isolation = 1 if opts.read_committed else 0

    def _request(self, offset: int) -> bytes:
        return replica_fetch.encode_request(-1, FETCH_MAX_WAIT_MS, 1, PARTITION_MAX_BYTES, {
            self.topic: [replica_fetch.FetchPartition(self.partition, -1, offset, -1, -1, PARTITION_MAX_BYTES)]},
            self.isolation)

    def fetch(self, offset: int) -> Any:
        """Start a Fetch at ``offset`` on the current leader; a concurrent future of the raw answer."""
        node = self.client.leader(self.topic, self.partition)
        conn = self.client.connection(node)
        return self.client.submit(conn.send_raw(ApiKey.FETCH, replica_fetch.FETCH_VERSION, self._request(offset)))

    def answer(self, future: Any) -> replica_fetch.FetchedPartition:
        _, parts = replica_fetch.decode_response(future.result(), keep_aborted=self.isolation == 1)
        for p in parts:
            if p.topic == self.topic and p.partition == self.partition:
                return p
        raise KafkaProtocolError(UNKNOWN_TOPIC_OR_PARTITION, f"Fetch {self.topic}-{self.partition}")

    def batch(self, cols: Any) -> pa.RecordBatch:
        n = len(cols)
        columns = [cols.keys, cols.values, constant_string(self.topic, n), constant_int32(self.partition, n),
                   cols.offsets, cols.timestamps, cols.timestamp_types]
        if self.opts.include_headers:
            columns.append(cols.headers)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield exactly the records with offsets in [start, end) of one partition.

    Fetched batches may start before ``start`` and offsets may have gaps (compaction,
    transaction markers), so records are filtered by offset and the end is reached by offset
    *or* by the partition's end (high watermark, or LSO under read_committed) being at or past
    ``end`` with nothing more to read. A leader change (NOT_LEADER_OR_FOLLOWER, a lost
    connection) refreshes metadata and fetches again from the same offset, for up to 60 s.
    """
    topic, part, start, end = rng.topic, rng.partition, rng.start, rng.end
    if end <= start:
        return
    reader = _RangeReader(opts, rng)
    client = reader.client
    nxt = start
    deadline = time.monotonic() + opts.poll_timeout_ms / 1000
    retry: Iterator[int] | None = None
    unknown = 0
    pending = None
    while nxt < end:
        try:
            fut = pending if pending is not None else reader.fetch(nxt)
            pending = None
            p = reader.answer(fut)
            if p.error_code:
                raise KafkaProtocolError(p.error_code, f"Fetch {topic}-{part} at offset {nxt}")
        except (KafkaProtocolError, ConnectionError, TimeoutError, OSError) as exc:
            code = getattr(exc, "code", None)
            if code == OFFSET_OUT_OF_RANGE:
                low = client.list_offset(topic, part, -2)
                high = client.list_offset(topic, part, -1, read_committed=opts.read_committed)
                if nxt < low:
                    report_data_loss(
                        opts.fail_on_data_loss,
                        f"Cannot fetch offset {nxt} of {topic}-{part}: the earliest available offset is {low}.",
                    )
                    nxt = low
                    continue
                if nxt >= high and high < end:
                    report_data_loss(
                        opts.fail_on_data_loss,
                        f"Offsets [{nxt}, {end}) of {topic}-{part} no longer exist: the log ends at {high} "
                        "(truncated after a leader change?).",
                    )
                    return
            if code == UNKNOWN_TOPIC_OR_PARTITION:
                unknown += 1
                if unknown > 8:
                    report_data_loss(opts.fail_on_data_loss, f"Topic-partition {topic}-{part} no longer exists.")
                    return
            elif code is not None and code not in RETRIABLE and code != OFFSET_OUT_OF_RANGE:
                raise
            if retry is None:
                retry = attempts()
            if next(retry, None) is None:
                raise TimeoutError(f"Could not read {topic}-{part} at offset {nxt} from its leader within "
                                   f"{LEADER_CHANGE_TIMEOUT_S:g} s: {exc}") from exc
            try:
                client.refresh_metadata([topic])
            except (ConnectionError, TimeoutError, OSError):
                pass
            continue
        retry, unknown = None, 0
        if p.records is None or not len(p.records):
            limit = p.last_stable_offset if opts.read_committed else p.high_watermark
            if limit >= end or (p.log_start_offset > nxt and p.log_start_offset >= end):
                break  # everything up to the end was seen; the missing offsets are gaps
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Timed out reading {topic}-{part} offsets [{nxt}, {end}) after "
                    f"{opts.poll_timeout_ms} ms (option kafkaConsumer.pollTimeoutMs)."
                )
            continue
        sel = select_batches(p.records, nxt, end, p.aborted, opts.read_committed)
        if sel.next_offset < end and sel.next_offset > nxt:
            pending = reader.fetch(sel.next_offset)  # in flight while this answer is decoded
        for run in sel.runs:
            cols = decode_run(run, nxt, end, opts.include_headers, reader.header_type)
            if len(cols):
                yield reader.batch(cols)
        if sel.next_offset > nxt:
            nxt = sel.next_offset
            deadline = time.monotonic() + opts.poll_timeout_ms / 1000
        elif time.monotonic() > deadline:
            raise TimeoutError(
                f"Timed out reading {topic}-{part} offsets [{nxt}, {end}) after "
                f"{opts.poll_timeout_ms} ms (option kafkaConsumer.pollTimeoutMs)."
            )
    if pending is not None:
        try:
            pending.result()  # keep the connection's answers in order for the next task
        except Exception:  # noqa: BLE001 - the next task reconnects if this one broke the connection
            pass


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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # Spark reads one dummy partition when none were planned
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

    def initialOffset(self) -> dict:
        tps = self.resolver.discover()
        return to_json(self.resolver.resolve(tps, ending=False))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

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

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return list(_plan(self.options, from_json(start), from_json(end)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, OffsetRange):  # Spark reads one dummy partition when none were planned
            yield from read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress is Spark's checkpoint, not broker-side group offsets."""

    def stop(self) -> None:
        self.resolver.close()


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

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.sink import StromBatchWriter

        if overwrite:
            raise StromOptionError(
                "Save mode 'overwrite' is not supported by the strom sink: a topic is an append-only "
                "log. Use mode('append'), or delete and recreate the topic first."
            )
        return StromBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.sink import StromStreamWriter

        return StromStreamWriter(parse_sink_options(self.options), schema)
