"""``/admin/reassign_partitions`` as the pre-KIP-455 tools write it: read leniently, written as Kafka writes it."""

from __future__ import annotations

import json

from strom.metadata.zk import zk_data as zd


def test_the_old_tools_json_round_trips() -> None:
    wanted = {("orders", 0): [3, 2], ("orders", 1): [1, 3]}
    data = zd.encode_partition_reassignment(wanted)
    assert json.loads(data) == {"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [3, 2]},
        {"topic": "orders", "partition": 1, "replicas": [1, 3]}]}
    assert zd.decode_partition_reassignment(data) == wanted


def test_entries_that_are_not_well_formed_are_skipped_and_garbage_asks_for_nothing() -> None:
    data = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2]},
        {"topic": "t", "partition": "1", "replicas": [1]},
        {"topic": "t", "partition": 2, "replicas": [1, True]},
        {"topic": "t", "partition": 3},
        "nonsense"]}).encode()
    assert zd.decode_partition_reassignment(data) == {("t", 0): [1, 2]}
    for garbage in (b"", b"{", b"[1, 2]", b"\xff\xfe", b'{"partitions": 5}', None):
        assert zd.decode_partition_reassignment(garbage) == {}
