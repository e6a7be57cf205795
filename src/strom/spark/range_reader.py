"""The read path of the `strom` source, run in executor tasks: one offset range to Arrow batches.

Imported only inside ``read()``: the driver-side planner process that Spark starts for every
streaming query never pays for the protocol and decoding modules.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from strom.protocol import replica_fetch
from strom.protocol.api_keys import ApiKey
from strom.spark.arrow import arrow_schema, constant_int32, constant_string
from strom.spark.batch_decode import decode_run, select_batches
from strom.spark.client import RETRIABLE, KafkaProtocolError, task_client
from strom.spark.offsets import report_data_loss
from strom.spark.options import SourceOptions
from strom.spark.retry import LEADER_CHANGE_TIMEOUT_S, attempts
from strom.spark.source import OffsetRange

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
        # The consumer's own keys still apply (the Java client's names, which librdkafka shares).
        self.max_bytes = int(opts.client.get("max.partition.fetch.bytes", PARTITION_MAX_BYTES))
        self.max_wait_ms = int(opts.client.get("fetch.max.wait.ms", opts.client.get("fetch.wait.max.ms",
                                                                                     FETCH_MAX_WAIT_MS)))

    def _request(self, offset: int) -> bytes:
        return replica_fetch.encode_request(-1, self.max_wait_ms, 1, self.max_bytes, {
            self.topic: [replica_fetch.FetchPartition(self.partition, -1, offset, -1, -1, self.max_bytes)]},
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
