"""Authorizer cost: what an ACL check adds per request, next to what a small produce request costs the broker.

Prints one JSON document on stdout (progress on stderr):

    python bench/bench_authorizer.py            # micro figures + 2 x 5 s of pipelined small produce requests
    python bench/bench_authorizer.py --seconds 0  # micro figures only

Micro: nanoseconds per call of RequestContext.authorize without an authorizer (the cost every handler pays
when ACLs are off), with an authorizer holding 100 ACLs (memoised decision, and a decision made from scratch),
and the Produce handler's whole authorization step for a one-topic request. End to end: a broker without an
authorizer, then one with 100 ACLs (the client, User:ANONYMOUS, is not a super user: its Write comes from
an ACL), each taking one-record Produce requests pipelined on one connection; broker CPU per request from
/proc. The share is the produce authorization step over the broker CPU of one such request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.protocol.producer import ProduceRequest  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

import bench_broker  # noqa: E402
from strom.broker.handlers import produce  # noqa: E402
from strom.broker.request import RequestContext  # noqa: E402
from strom.broker.session import Session  # noqa: E402
from strom.config.listeners import EndPoint  # noqa: E402
from strom.metadata.embedded import EmbeddedMetadataStore  # noqa: E402
from strom.protocol.record_batch import build_batch  # noqa: E402
from strom.security.acl import (  # noqa: E402
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.security.authorizer import AclAuthorizer  # noqa: E402
from strom.security.principal import ANONYMOUS  # noqa: E402

TOPIC = "bench-acl"
ACL_COUNT = 100


def hundred_acls() -> list[AclBinding]:
    """A realistic mix: per-user literal topic ACLs, prefixes, groups, wildcards, DENYs, cluster rights."""
    Op, Perm, Res, Pat = AclOperation, AclPermissionType, ResourceType, PatternType  # noqa: N806

    def b(res: ResourceType, name: str, principal: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW,
          pat: PatternType = Pat.LITERAL) -> AclBinding:
        return AclBinding(ResourcePattern(res, name, pat), AccessControlEntry(principal, "*", op, perm))

    out = [b(Res.TOPIC, TOPIC, "User:ANONYMOUS", Op.WRITE), b(Res.TOPIC, TOPIC, "User:ANONYMOUS", Op.READ)]
    for u in range(20):
        out += [b(Res.TOPIC, f"topic-{u}", f"User:user{u}", op) for op in (Op.READ, Op.WRITE, Op.DESCRIBE)]
    out += [b(Res.TOPIC, f"team{i}-", f"User:user{i}", Op.ALL, pat=Pat.PREFIXED) for i in range(10)]
    out += [b(Res.GROUP, f"group-{i}", f"User:user{i}", Op.READ) for i in range(10)]
    out += [b(Res.TOPIC, "*", f"User:reader{i}", Op.DESCRIBE) for i in range(5)]
    out += [b(Res.TOPIC, f"topic-{i}", "User:mallory", Op.ALL, Perm.DENY) for i in range(10)]
    out += [b(Res.CLUSTER, "kafka-cluster", f"User:ops{i}", Op.DESCRIBE) for i in range(ACL_COUNT - len(out))]
    assert len(out) == ACL_COUNT
    return out


def ns_per_call(fn: Any, number: int) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5))
    return round(best / number * 1e9, 1)


def micro() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        authorizer = AclAuthorizer(EmbeddedMetadataStore(d, 0), ())
        authorizer.start()
        results = asyncio.run(authorizer.create_acls(hundred_acls()))
        assert results == [None] * ACL_COUNT
        session = Session.for_connection(EndPoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092), "127.0.0.1")
        header = SimpleNamespace(api_key=0, api_version=9, client_id="bench", correlation_id=1)
        off = RequestContext(header, SimpleNamespace(authorizer=None), "127.0.0.1", session)  # type: ignore[arg-type]
        on = RequestContext(header, SimpleNamespace(authorizer=authorizer), "127.0.0.1", session)  # type: ignore[arg-type]
        write, topic = AclOperation.WRITE, ResourceType.TOPIC
        request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=0, records=build_batch([(None, b"x" * 100, [], 0)]))])])
        assert produce._authorize(on, request) == (0, [])
        figures = {
            "acls": ACL_COUNT,
            "authorize_without_authorizer_ns": ns_per_call(lambda: off.authorize(write, topic, TOPIC), 200_000),
            "authorize_memoised_ns": ns_per_call(lambda: on.authorize(write, topic, TOPIC), 200_000),
            "decision_from_scratch_ns": ns_per_call(
                lambda: authorizer._decide(ANONYMOUS, "127.0.0.1", write, topic, TOPIC), 50_000),
            "decision_from_scratch_unknown_user_ns": ns_per_call(
                lambda: authorizer._decide(ANONYMOUS, "127.0.0.1", write, topic, "topic-7"), 50_000),
            "produce_authorization_step_ns": ns_per_call(lambda: produce._authorize(on, request), 100_000),
            "produce_handler_test_without_authorizer_ns": ns_per_call(
                lambda: off.services.authorizer is not None, 200_000),
        }
    return figures


def end_to_end(seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, overrides in (("without_authorizer", {}),
                             ("with_authorizer_100_acls", {"authorizer.class.name":
                                                           "kafka.security.authorizer.AclAuthorizer"})):
        with tempfile.TemporaryDirectory() as d:
            broker = BrokerProcess(d, {**overrides, "super.users": "User:ANONYMOUS"} if overrides else {})
            broker.start()
            try:
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
                if overrides:
                    for f in admin.create_acls([_confluent(b) for b in hundred_acls()]).values():
                        f.result(15)
                    broker.stop()  # again without super users: the client's Write now comes from its ACL
                    broker.overrides["super.users"] = ""
                    broker.start()
                time.sleep(0.5)
                bench_broker.log(f"{label}: {seconds:.0f} s of one-record produce requests")
                res = bench_broker.raw_small_produce(broker.port, broker.pid or 0, TOPIC, 100, seconds, 64)
                assert res["errors"] == 0, res
                out[label] = {k: res[k] for k in ("requests_s", "broker_cpu_us_per_request", "broker_cores_busy")}
            finally:
                broker.close()
    return out


def _confluent(b: AclBinding) -> Any:
    from confluent_kafka.admin import AclBinding as CAcl
    from confluent_kafka.admin import AclOperation as COp
    from confluent_kafka.admin import AclPermissionType as CPerm
    from confluent_kafka.admin import ResourcePatternType as CPat
    from confluent_kafka.admin import ResourceType as CRes

    rtype = CRes.BROKER if b.pattern.resource_type == ResourceType.CLUSTER else CRes[b.pattern.resource_type.name]
    return CAcl(rtype, b.pattern.name, CPat[b.pattern.pattern_type.name], b.entry.principal, b.entry.host,
                COp[b.entry.operation.name], CPerm[b.entry.permission_type.name])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="per end-to-end phase; 0 skips them")
    args = ap.parse_args()
    result: dict[str, Any] = {"micro": micro()}
    if args.seconds > 0:
        e2e = end_to_end(args.seconds)
        result["end_to_end"] = e2e
        per_request_us = e2e["without_authorizer"]["broker_cpu_us_per_request"]
        step_us = result["micro"]["produce_authorization_step_ns"] / 1000
        result["authorizer_share_of_produce_request_cpu"] = round(step_us / per_request_us, 4)
        result["target"] = "authorizer <= 5% of broker CPU per request at 100 ACLs"
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
