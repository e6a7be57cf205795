"""acks=all waits for the ISR without blocking the connection: a broker in this process, a follower faked.

The partition is given a second ISR member (broker 1) that only exists as Fetch requests with replica id 1,
so the HW moves exactly when the test says the follower caught up.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import kafka.errors as Errors
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from strom.broker.server import KafkaServer
from strom.config import BrokerConfig
from strom.protocol.record_batch import build_batch

TOPIC = "acks-all"


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.correlation = reader, writer, 0

    def send(self, req, version: int) -> int:  # noqa: ANN001
        self.correlation += 1
        req.with_header(correlation_id=self.correlation, client_id="acks-all")
        self.writer.write(bytes(req.encode(version=version, header=True, framed=True)))
        return self.correlation

    async def read(self, version: int) -> tuple[int, ProduceResponse]:
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        frame = await self.reader.readexactly(size)
        return struct.unpack(">i", frame[:4])[0], ProduceResponse.decode(frame[4:], version=version)


def produce_request(acks: int, value: bytes, timeout_ms: int = 30_000) -> ProduceRequest:
    batch = build_batch([(None, value, (), 1_700_000_000_000)])
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(batch))])])


def follower_fetch(offset: int) -> FetchRequest:
    return FetchRequest(replica_id=1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                            FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                   fetch_offset=offset, log_start_offset=-1,
                                                                   partition_max_bytes=1 << 20)])],
                        forgotten_topics_data=[], rack_id="")


def only(resp: ProduceResponse) -> tuple[int, int]:
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


async def start(tmp_path: Path, min_isr: int = 2) -> tuple[KafkaServer, Conn]:
    server = KafkaServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}))
    await server.startup()
    await server.admin_manager.create_topic(TOPIC, 1, 1, configs={"min.insync.replicas": str(min_isr)})
    part = server.replica_manager.get_partition(TOPIC, 0)
    part.replicas = [server.broker_id, 1]
    part.isr = [server.broker_id, 1]
    return server, Conn(*await asyncio.open_connection("127.0.0.1", server.port))


def test_acks_all_waits_for_follower_and_answers_in_order(tmp_path: Path) -> None:
    async def run() -> None:
        server, conn = await start(tmp_path)
        try:
            first = conn.send(produce_request(-1, b"waits"), 7)
            second = conn.send(produce_request(1, b"leader only"), 7)
            await asyncio.sleep(0.2)
            part = server.replica_manager.get_partition(TOPIC, 0)
            # Both appended (phase 1), no answer yet: the acks=1 answer is ordered behind the waiting one.
            assert part.log_end_offset == 2 and part.high_watermark == 0
            assert server.replica_manager.produce_purgatory.delayed() == 1
            with_timeout = asyncio.wait_for(conn.read(7), 0.2)
            try:
                await with_timeout
                raise AssertionError("answered before the follower caught up")
            except TimeoutError:
                pass
            follower = Conn(*await asyncio.open_connection("127.0.0.1", server.port))
            follower.send(follower_fetch(2), 11)  # the follower has both records: HW 2
            corr1, resp1 = await asyncio.wait_for(conn.read(7), 5)
            corr2, resp2 = await asyncio.wait_for(conn.read(7), 5)
            assert (corr1, only(resp1)) == (first, (0, 0))
            assert (corr2, only(resp2)) == (second, (0, 1))
            assert part.high_watermark == 2
            follower.writer.close()
        finally:
            conn.writer.close()
            await server.shutdown()

    asyncio.run(run())


def test_acks_all_times_out_and_rechecks_min_isr(tmp_path: Path) -> None:
    async def run() -> None:
        server, conn = await start(tmp_path)
        try:
            conn.send(produce_request(-1, b"nobody replicates", timeout_ms=100), 7)
            _, resp = await asyncio.wait_for(conn.read(7), 5)
            assert only(resp) == (Errors.RequestTimedOutError.errno, 0)
            # The ISR shrinks to the leader while a second produce waits: the HW moves, min ISR fails.
            conn.send(produce_request(-1, b"isr shrinks"), 7)
            await asyncio.sleep(0.1)
            part = server.replica_manager.get_partition(TOPIC, 0)
            part.isr = [server.broker_id]
            part.maybe_increment_high_watermark()
            server.replica_manager.produce_purgatory.check_and_complete((TOPIC, 0))
            _, resp = await asyncio.wait_for(conn.read(7), 5)
            assert only(resp) == (Errors.NotEnoughReplicasAfterAppendError.errno, 1)
        finally:
            conn.writer.close()
            await server.shutdown()

    asyncio.run(run())
