"""An exactly-once copy loop (input topic -> output topic in Kafka transactions), run as a child process.

The crash tests kill -9 brokers under it, and kill -9 the loop itself, so it runs in its own
process: `python -m tests.support.copy_loop --bootstrap ... --input IN --output OUT --group G
--transactional-id T --partitions 3`. Each transaction consumes up to `--batch` records with a
read_committed consumer of group G, produces every value to the output topic, sends the consumed
offsets with send_offsets_to_transaction and commits. On any error it aborts (or, when the
producer cannot abort, builds a new one: its init_transactions fences the old one and finishes or
aborts whatever that one left open), re-reads the group's committed offsets and seeks there. So the
committed offsets always name exactly what the committed output holds, whatever crashed.

It exits 0 once the committed offsets reach the input's end offsets. After every commit it writes
the number of input records committed so far to `--progress` (the tests pace their kills by it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

OP_TIMEOUT = 30.0
# Exit status of a loop that a client call left hanging well past its own timeout (see Watchdog).
EXIT_WEDGED = 75


class Watchdog:
    """Ends the process when one client call outlives its timeout by far.

    librdkafka can leave send_offsets_to_transaction waiting for ever on a group coordinator it
    decommissioned because the broker dropped out of Metadata, as Kafka's Metadata does with a dead
    broker (librdkafka issue #5511); no timeout reaches it. The test restarts a wedged loop with
    the same transactional.id, which is just another client crash to an exactly-once pipeline.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.call: tuple[str, float] | None = None
        threading.Thread(target=self._watch, daemon=True).start()

    @contextlib.contextmanager
    def guard(self, name: str, timeout: float = OP_TIMEOUT) -> Iterator[None]:
        self.call = (name, time.monotonic() + timeout + self.grace)
        try:
            yield
        finally:
            self.call = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.5)
            call = self.call
            if call is not None and time.monotonic() > call[1]:
                log(f"{call[0]} hangs past its timeout; exiting with {EXIT_WEDGED}")
                os._exit(EXIT_WEDGED)


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} copy-loop[{os.getpid()}] {msg}", file=sys.stderr, flush=True)


class CopyLoop:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.partitions = [TopicPartition(args.input, p) for p in range(args.partitions)]
        # librdkafka's own log (to stderr, so into the loop's log file) says why a transaction failed
        self.debug = {"debug": args.debug, "log_level": 7} if args.debug else {"log_level": 3}
        # With the only broker down librdkafka "re-bootstraps": it decommissions every known broker,
        # and a decommissioned broker that stays cached as group coordinator leaves
        # send_offsets_to_transaction hanging past its timeout (librdkafka issue #5511, seen here
        # after a kill -9). Not re-bootstrapping keeps the broker handles alive across restarts.
        self.client = {"bootstrap.servers": args.bootstrap, "metadata.recovery.strategy": "none", **self.debug}
        self.consumer = Consumer({
            **self.client, "group.id": args.group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
        })
        self.producer: Producer | None = None
        self.positions: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.transactions = 0
        self.recoveries = 0
        self.watchdog = Watchdog(grace=10.0)

    # -- setup and recovery --------------------------------------------------
    def new_producer(self, deadline: float) -> None:
        """A fresh transactional producer; init_transactions fences any older one with the same id."""
        while True:
            producer = Producer({
                **self.client, "transactional.id": self.args.transactional_id,
                "transaction.timeout.ms": self.args.transaction_timeout_ms, "linger.ms": 5,
            })
            try:
                with self.watchdog.guard("init_transactions"):
                    producer.init_transactions(OP_TIMEOUT)
                self.producer = producer
                return
            except KafkaException as exc:
                log(f"init_transactions: {exc.args[0]}")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def seek_to_committed(self, deadline: float) -> None:
        """Positions := the group's committed offsets (stable ones: read_committed asks require_stable)."""
        while True:
            try:
                with self.watchdog.guard("committed"):
                    committed = self.consumer.committed(self.partitions, OP_TIMEOUT)
                errors = [tp.error for tp in committed if tp.error is not None]
                if not errors:
                    break
                log(f"committed offsets: {errors[0]}")
            except KafkaException as exc:
                log(f"committed offsets: {exc.args[0]}")
            if time.monotonic() > deadline:
                raise TimeoutError("no committed offsets")
            time.sleep(0.5)
        self.positions = {tp.partition: max(tp.offset, 0) for tp in committed}
        self.consumer.assign([TopicPartition(self.args.input, p, o) for p, o in self.positions.items()])

    def read_end_offsets(self, deadline: float) -> None:
        for tp in self.partitions:
            while True:
                try:
                    self.ends[tp.partition] = self.consumer.get_watermark_offsets(tp, OP_TIMEOUT)[1]
                    break
                except KafkaException as exc:
                    log(f"end offsets: {exc.args[0]}")
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

    def recover(self, error: KafkaError | None) -> None:
        """Abort when the producer can; otherwise replace it. Then go back to the committed offsets."""
        self.recoveries += 1
        deadline = time.monotonic() + self.args.recover_timeout
        assert self.producer is not None
        aborted = False
        if error is not None and error.txn_requires_abort() and not error.fatal():
            try:
                with self.watchdog.guard("abort_transaction"):
                    self.producer.abort_transaction(OP_TIMEOUT)
                aborted = True
            except KafkaException as exc:
                log(f"abort_transaction: {exc.args[0]}")
        if not aborted:
            self.producer = None  # dropped: a new producer's init_transactions fences it
            self.new_producer(deadline)
        self.seek_to_committed(deadline)
        log(f"recovered ({'aborted' if aborted else 'new producer'}), positions {self.positions}")

    # -- the loop ------------------------------------------------------------
    def done(self) -> bool:
        return all(self.positions[p] >= end for p, end in self.ends.items())

    def write_progress(self) -> None:
        if self.args.progress:
            tmp = Path(self.args.progress + ".tmp")
            tmp.write_text(str(sum(self.positions.values())))
            os.replace(tmp, self.args.progress)

    def one_transaction(self) -> None:
        assert self.producer is not None
        records = [m for m in self.consumer.consume(self.args.batch, 1.0) if m.error() is None]
        if not records:
            return
        self.producer.begin_transaction()
        offsets: dict[int, int] = {}
        for m in records:
            self.producer.produce(self.args.output, value=m.value(), key=m.key())
            offsets[m.partition()] = m.offset() + 1
        time.sleep(self.args.pause / 2)  # the kills of the tests should often land inside a transaction
        with self.watchdog.guard("send_offsets_to_transaction"):
            self.producer.send_offsets_to_transaction(
                [TopicPartition(self.args.input, p, o) for p, o in offsets.items()],
                self.consumer.consumer_group_metadata(), OP_TIMEOUT)
        time.sleep(self.args.pause / 2)
        with self.watchdog.guard("commit_transaction"):
            self.producer.commit_transaction(OP_TIMEOUT)
        self.positions.update(offsets)
        self.transactions += 1
        self.write_progress()

    def run(self) -> int:
        deadline = time.monotonic() + self.args.recover_timeout
        self.read_end_offsets(deadline)
        self.new_producer(deadline)
        self.seek_to_committed(deadline)
        log(f"start at {self.positions}, ends {self.ends}")
        self.write_progress()
        while not self.done():
            try:
                self.one_transaction()
            except KafkaException as exc:
                log(f"transaction failed: {exc.args[0]}")
                self.recover(exc.args[0])
        log(f"done: {self.transactions} transactions, {self.recoveries} recoveries, positions {self.positions}")
        self.consumer.close()
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="partitions of the input topic")
    parser.add_argument("--batch", type=int, default=20, help="records per transaction at most")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds spent inside each transaction (half before, half after sending offsets)")
    parser.add_argument("--transaction-timeout-ms", type=int, default=20_000)
    parser.add_argument("--recover-timeout", type=float, default=120.0, help="give up recovering after this")
    parser.add_argument("--debug", default="", help="librdkafka debug contexts, e.g. eos,protocol")
    parser.add_argument("--progress", help="file that gets the number of committed input records")
    return CopyLoop(parser.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
