"""Security cost: produce and consume throughput over PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL, side by side.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_security.py                       # 300,000 x 1 KiB per listener, 2 alternating rounds
    python bench/bench_security.py --records 100000 --rounds 3

One broker with the four listeners (SCRAM-SHA-512 on the SASL ones, a server certificate on the TLS ones, no
client certificates), one topic per listener and round, confluent-kafka clients. The rounds visit the listeners
in turn (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL, then again), so a busy moment of this shared machine hits all
of them alike; the report keeps each listener's best round. Fetches on plaintext listeners go out with sendfile
(zero copy); TLS has to encrypt in user space, so the broker copies the segment bytes there: the SSL columns
show what that costs, in MB/s and in broker CPU per MB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from tests.support.broker import BrokerProcess, free_port  # noqa: E402
from tests.support.certs import CertificateAuthority  # noqa: E402

import bench_broker  # noqa: E402
from bench_broker import Profiler, consume_confluent, log, produce_confluent  # noqa: E402

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
PARTITIONS = 2


def start_broker(workdir: Path) -> tuple[BrokerProcess, dict[str, int], str]:
    ca = CertificateAuthority(workdir / "certs")
    server = ca.issue("broker", "localhost", server=True)
    ports = {name: free_port() for name in LISTENERS}
    broker = BrokerProcess(workdir, {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.location": str(server.keystore),
        "ssl.truststore.location": str(ca.ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }, port=ports["PLAINTEXT"])
    broker.start()
    return broker, ports, str(ca.ca_file)


def client_conf(listener: str, port: int, ca_file: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if listener.startswith("SASL_"):
        conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = ca_file
    return conf


def best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rounds, key=lambda r: r["mb_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {"produce": [], "consume": []} for name in LISTENERS}
    with tempfile.TemporaryDirectory(prefix="strom-bench-security-") as d:
        broker, ports, ca_file = start_broker(Path(d))
        try:
            pid = broker.pid or 0
            no_profile = Profiler(None)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            from confluent_kafka.admin import (
                ScramCredentialInfo,
                ScramMechanism,
                UserScramCredentialUpsertion,
            )

            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())]).values():
                f.result(15)
            # Untimed warm-up (page cache, the broker's first appends and fetches), so round 1 is not penalised.
            warm = client_conf("PLAINTEXT", ports["PLAINTEXT"], ca_file)
            admin.create_topics([NewTopic("warm-up", PARTITIONS, 1)])["warm-up"].result(15)
            produce_confluent(broker.bootstrap, pid, "warm-up", 20_000, args.record_size, no_profile, "warm", warm)
            consume_confluent(broker.bootstrap, pid, "warm-up", PARTITIONS, 20_000, no_profile, "warm", warm)
            for r in range(args.rounds):
                for name in LISTENERS:
                    topic = f"sec-{name.lower()}-{r}"
                    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
                    conf = client_conf(name, ports[name], ca_file)
                    bench_broker.settle()
                    log(f"round {r + 1}: {name} produce {args.records} x {args.record_size} B")
                    runs[name]["produce"].append(produce_confluent(
                        conf["bootstrap.servers"], pid, topic, args.records, args.record_size, no_profile, name,
                        conf))
                    bench_broker.settle()
                    log(f"round {r + 1}: {name} consume")
                    runs[name]["consume"].append(consume_confluent(
                        conf["bootstrap.servers"], pid, topic, PARTITIONS, args.records, no_profile, name, conf))
        finally:
            broker.close()
    result: dict[str, Any] = {"records": args.records, "record_size": args.record_size, "rounds": args.rounds,
                              "client": "confluent-kafka", "best_of_rounds": {}, "all_rounds": runs}
    keys = ("mb_s", "records_s", "broker_cpu_ms_per_mb", "broker_cores_busy", "other_cores_busy", "errors")
    for name in LISTENERS:
        result["best_of_rounds"][name] = {kind: {k: best(rs)[k] for k in keys}
                                          for kind, rs in runs[name].items()}
    plain = result["best_of_rounds"]["PLAINTEXT"]
    result["relative_to_plaintext"] = {
        name: {kind: round(result["best_of_rounds"][name][kind]["mb_s"] / plain[kind]["mb_s"], 2)
               for kind in ("produce", "consume")}
        for name in LISTENERS}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
