"""Kafka's ZooKeeper payloads: encoders and decoders agree and match Kafka's shapes."""

from __future__ import annotations

import json
import uuid

from strom.metadata.zk import zk_data as zd
from strom.metadata.zk.kafka_zk_client import split_connect_string
from strom.metadata.zk.zookeeper_server import ZooKeeperServer


def test_uuid_is_kafkas_url_safe_base64_without_padding() -> None:
    value = uuid.UUID(bytes=bytes(range(250, 256)) + bytes(10))
    text = zd.encode_uuid(value)
    assert len(text) == 22 and "=" not in text and "+" not in text and "/" not in text
    assert "-" in text or "_" in text  # URL-safe alphabet for the high bytes
    assert zd.decode_uuid(text) == value
    assert zd.decode_uuid(str(value)) == value


def test_broker_registration_round_trip_and_protocol_map() -> None:
    data = zd.encode_broker_registration(["INTERNAL://10.0.0.1:9093", "PLAINTEXT://h:9092"], {"INTERNAL": "SSL"})
    js = json.loads(data)
    assert js["listener_security_protocol_map"] == {"INTERNAL": "SSL", "PLAINTEXT": "PLAINTEXT"}
    assert (js["host"], js["port"]) == ("h", 9092)  # the first PLAINTEXT endpoint
    reg = zd.decode_broker_registration(4, data, czxid=77)
    assert (reg.id, reg.epoch, reg.endpoint("INTERNAL")) == (4, 77, ("10.0.0.1", 9093))


def test_broker_registration_without_plaintext_has_no_host() -> None:
    js = json.loads(zd.encode_broker_registration(["SSL://h:9093"]))
    assert js["host"] is None and js["port"] == -1


def test_topic_assignment_round_trip() -> None:
    tid = uuid.uuid4()
    data = zd.encode_topic_assignment(tid, {1: [2, 3], 0: [1, 2]}, adding_replicas={0: [3]}, removing_replicas={1: []})
    js = json.loads(data)
    assert js["adding_replicas"] == {"0": [3]} and js["removing_replicas"] == {}
    got = zd.decode_topic_assignment(data, zk_version=4)
    assert got == zd.TopicAssignment(tid, {0: [1, 2], 1: [2, 3]}, {0: [3]}, {}, 4)
    assert "topic_id" not in json.loads(zd.encode_topic_assignment(None, {0: [1]}))


def test_partition_state_omits_recovered_leader_recovery_state() -> None:
    recovered = zd.LeaderIsrAndControllerEpoch(1, 2, [1, 3], 5)
    assert set(json.loads(zd.encode_partition_state(recovered))) == {
        "version", "leader", "leader_epoch", "controller_epoch", "isr"
    }  # fmt: skip
    recovering = zd.LeaderIsrAndControllerEpoch(1, 2, [1], 5, zd.LEADER_RECOVERY_RECOVERING)
    assert zd.decode_partition_state(zd.encode_partition_state(recovering)) == recovering


def test_small_payloads() -> None:
    assert zd.encode_controller_epoch(12) == b"12"
    assert zd.decode_controller(zd.encode_controller(3)) == 3
    block = zd.ProducerIdsBlock(2, 5000, 1000)
    assert json.loads(zd.encode_producer_id_block(block))["block_end"] == "5999"
    assert zd.decode_producer_id_block(zd.encode_producer_id_block(block)) == block
    assert zd.decode_entity_config(None) == {} and zd.decode_entity_config(b"") == {}
    assert json.loads(zd.encode_config_change("brokers", "<default>"))["entity_path"] == "brokers/<default>"


def test_connect_string_chroot() -> None:
    assert split_connect_string("a:1,b:2/kafka/x/") == ("a:1,b:2", "/kafka/x")
    assert split_connect_string("a:1") == ("a:1", "")


def test_ensemble_config_lists_every_peer(tmp_path) -> None:
    from strom.metadata.zk.zookeeper_server import QuorumPeer

    peers = [QuorumPeer(1, 1001, 2001), QuorumPeer(2, 1002, 2002)]
    server = ZooKeeperServer(tmp_path, 3000, server_id=2, peers=peers)
    text = server.write_config().read_text()
    assert "server.1=127.0.0.1:1001:2001" in text and "server.2=127.0.0.1:1002:2002" in text
    assert "clientPort=3000" in text and "tickTime=500" in text
    assert (tmp_path / "data" / "myid").read_text().strip() == "2"


def test_log_dir_event_is_kafkas_and_rejects_other_events() -> None:
    assert json.loads(zd.encode_log_dir_event(3)) == {"version": 1, "broker": 3, "event": 1}
    assert zd.decode_log_dir_event(zd.encode_log_dir_event(3)) == 3
    assert zd.decode_log_dir_event(b'{"version":1,"broker":2}') == 2  # event defaults to a failure
    for junk in (b'{"version":1,"broker":2,"event":7}', b'{"broker":true}', b"[]", b"{", b""):
        assert zd.decode_log_dir_event(junk) is None
