"""Console message browser: how long a page's read takes (KafkaGateway.browse, no web layer).

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_console_browse.py --records 20000 --size 200

One broker (PLAINTEXT), one partition holding `records` records of `size` bytes. Timed, best and median of
`--repeat` runs: the newest 50 records, and a search that scans the whole partition (no match). Run it with
PYTHONPATH pointing at another checkout's sources to compare implementations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

from strom.console.kafka_client import BrowseQuery, KafkaGateway  # noqa: E402


def timed(fn, repeat: int) -> dict[str, float]:  # noqa: ANN001 - a callable returning a BrowseResult
    runs, scanned = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        scanned = fn().scanned
        runs.append(time.perf_counter() - start)
    return {"best_s": round(min(runs), 3), "median_s": round(statistics.median(runs), 3), "scanned": scanned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        broker = BrokerProcess(data_dir)
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("browse", 1, 1)])["browse"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
            value = b"v" * args.size
            for i in range(args.records):
                producer.produce("browse", value, key=str(i).encode())
                if i % 10000 == 0:
                    producer.poll(0)
            assert producer.flush(60) == 0
            print(f"produced {args.records} records", file=sys.stderr)
            gateway = KafkaGateway({"bootstrap.servers": broker.bootstrap}, timeout=30, browse_timeout=120)
            newest = timed(lambda: gateway.browse("browse", BrowseQuery(partition=0, limit=50)), args.repeat)
            scan = timed(lambda: gateway.browse("browse", BrowseQuery(partition=0, search="no-such-text",
                                                                      scan=args.records)), args.repeat)
            gateway.close()
        finally:
            broker.close()
    scan["records_per_s"] = round(args.records / scan["best_s"]) if scan["best_s"] else None
    print(json.dumps({"records": args.records, "size": args.size, "newest_50": newest, "full_scan": scan}, indent=2))


if __name__ == "__main__":
    main()
