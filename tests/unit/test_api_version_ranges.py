"""Strom advertises at least Kafka 3.9's version range of every API it implements.

KAFKA_3_9 is data: the "validVersions" of each request's message definition at Kafka 3.9
(clients/src/main/resources/common/message/*Request.json). Where Strom's max is higher (a Kafka 4.x
version, e.g. Metadata v13), the higher max stays; the low end must reach 3.9's so old clients work.

Run as a script to print the comparison table: ``python -m tests.unit.test_api_version_ranges``.
"""

from __future__ import annotations

from strom.broker import server
from strom.broker.apis import KafkaApis
from strom.broker.handlers import consumer_group_describe, consumer_group_heartbeat
from strom.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey

KAFKA_3_9: dict[int, tuple[int, int]] = {
    0: (0, 11),   # Produce (v11: KIP-890 TRANSACTION_ABORTABLE)
    1: (0, 17),   # Fetch (v17: replica directory id, KIP-853)
    2: (0, 9),    # ListOffsets
    3: (0, 12),   # Metadata
    4: (0, 7),    # LeaderAndIsr
    5: (0, 4),    # StopReplica
    6: (0, 8),    # UpdateMetadata
    7: (0, 3),    # ControlledShutdown
    8: (0, 9),    # OffsetCommit
    9: (0, 9),    # OffsetFetch
    10: (0, 6),   # FindCoordinator (v5: KIP-890, v6: share groups KIP-932)
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 5),   # ListGroups
    17: (0, 1),   # SaslHandshake
    18: (0, 4),   # ApiVersions
    19: (0, 7),   # CreateTopics
    20: (0, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 5),   # InitProducerId
    23: (0, 4),   # OffsetForLeaderEpoch
    24: (0, 5),   # AddPartitionsToTxn (v4: batched broker verification, v5: KIP-890)
    25: (0, 4),   # AddOffsetsToTxn (v4: KIP-890)
    26: (0, 4),   # EndTxn (v4: KIP-890)
    27: (0, 1),   # WriteTxnMarkers
    28: (0, 4),   # TxnOffsetCommit (v4: KIP-890)
    29: (0, 3),   # DescribeAcls
    30: (0, 3),   # CreateAcls
    31: (0, 3),   # DeleteAcls
    32: (0, 4),   # DescribeConfigs
    33: (0, 2),   # AlterConfigs
    34: (0, 2),   # AlterReplicaLogDirs
    35: (0, 4),   # DescribeLogDirs
    36: (0, 2),   # SaslAuthenticate
    37: (0, 3),   # CreatePartitions
    38: (0, 3),   # CreateDelegationToken
    39: (0, 2),   # RenewDelegationToken
    40: (0, 2),   # ExpireDelegationToken
    41: (0, 3),   # DescribeDelegationToken
    42: (0, 2),   # DeleteGroups
    43: (0, 2),   # ElectLeaders
    44: (0, 1),   # IncrementalAlterConfigs
    45: (0, 0),   # AlterPartitionReassignments
    46: (0, 0),   # ListPartitionReassignments
    47: (0, 0),   # OffsetDelete
    48: (0, 1),   # DescribeClientQuotas
    49: (0, 1),   # AlterClientQuotas
    50: (0, 0),   # DescribeUserScramCredentials
    51: (0, 0),   # AlterUserScramCredentials
    56: (0, 3),   # AlterPartition
    57: (0, 1),   # UpdateFeatures
    58: (0, 0),   # Envelope
    60: (0, 1),   # DescribeCluster
    61: (0, 0),   # DescribeProducers
    65: (0, 0),   # DescribeTransactions
    66: (0, 1),   # ListTransactions
    67: (0, 0),   # AllocateProducerIds
    68: (0, 0),   # ConsumerGroupHeartbeat
    69: (0, 0),   # ConsumerGroupDescribe
}

# APIs a Kafka 3.9 ZooKeeper broker serves that Strom does not implement at all (not advertised, so
# not a version gap): delegation tokens, feature flags, forwarding, ZooKeeper-mode producer id blocks.
NOT_IMPLEMENTED = {38, 39, 40, 41, 57, 58, 67}


def advertised() -> dict[int, tuple[int, int]]:
    """What a cluster broker with both group protocols enabled answers in ApiVersions."""
    apis = KafkaApis()
    for module in [*server.HANDLER_MODULES, *server.CLUSTER_HANDLER_MODULES,
                   consumer_group_heartbeat, consumer_group_describe]:
        apis.register_module(module)
    return apis.advertised()


def gaps() -> dict[int, tuple[tuple[int, int] | None, tuple[int, int]]]:
    """API key -> (Strom's range or None, Kafka 3.9's) wherever Strom's range does not cover 3.9's."""
    ours = advertised()
    out: dict[int, tuple[tuple[int, int] | None, tuple[int, int]]] = {}
    for key, (lo, hi) in KAFKA_3_9.items():
        mine = ours.get(key)
        if mine is None and key in NOT_IMPLEMENTED:
            continue
        if mine is None or mine[0] > lo or mine[1] < hi:
            out[key] = (mine, (lo, hi))
    return out


def test_every_implemented_api_covers_kafka_3_9_range() -> None:
    assert {ApiKey(k).name: v for k, v in gaps().items()} == {}


def test_handler_versions_agree_with_the_api_keys_table() -> None:
    """SUPPORTED_VERSIONS is what tests iterate over; a handler's VERSIONS is what is advertised."""
    ours = advertised()
    assert {ApiKey(k).name: (SUPPORTED_VERSIONS[k], v) for k, v in ours.items()
            if k in SUPPORTED_VERSIONS and SUPPORTED_VERSIONS[k] != v} == {}


def test_nothing_advertised_that_kafka_3_9_does_not_define() -> None:
    """Every advertised API exists in Kafka 3.9 (Strom speaks 3.9's APIs, with some 4.x versions)."""
    assert set(advertised()) <= set(KAFKA_3_9)


if __name__ == "__main__":
    ours = advertised()
    for key, theirs in sorted(KAFKA_3_9.items()):
        mine = ours.get(key)
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else f"key {key}"
        status = "not implemented" if mine is None else \
            "GAP" if mine[0] > theirs[0] or mine[1] < theirs[1] else \
            "above 3.9 (4.x)" if mine[1] > theirs[1] else "ok"
        print(f"{key:3d} {name:32s} strom={mine!s:10s} kafka3.9={theirs!s:10s} {status}")
