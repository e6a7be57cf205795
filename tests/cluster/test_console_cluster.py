"""The web console against three brokers: brokers and controller, replicas and ISR, sizes per leader,
and a follower's loss shown as an under-replicated partition."""

from __future__ import annotations

import re
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from strom.console.app import ConsoleSettings, create_app
from tests.support.cluster import ClusterProcess

pytestmark = [pytest.mark.cluster, pytest.mark.zookeeper, pytest.mark.slow]


def test_console_shows_a_replicated_topic(cluster_factory) -> None:
    cluster: ClusterProcess = cluster_factory(3)
    topic = f"console-rf3-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result()
    cluster.wait_isr(topic, 0, [1, 2, 3])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _ in range(20):
        producer.produce(topic, b"x" * 100, partition=0)
    assert producer.flush(30) == 0
    app = create_app(ConsoleSettings({"bootstrap.servers": cluster.bootstrap}, timeout=10))
    with TestClient(app, raise_server_exceptions=False) as client:
        overview = client.get("/").text
        assert len(re.findall(r"<tr><td class=\"num\">\d</td>", overview)) == 3
        controller = cluster.controller_id()
        assert re.search(rf'<td class="num">{controller}</td>.*?controller</span>', overview, re.S)

        page = client.get(f"/topics/{topic}").text
        row = re.search(r'<tbody>\s*<tr>(.*?)</tr>', page.split('id="partitions"')[1], re.S).group(1)
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        leader = cluster.partition_state(topic, 0).leader
        assert cells[1] == str(leader)
        assert sorted(cells[2].split(", ")) == ["1", "2", "3"] and sorted(cells[3].split(", ")) == ["1", "2", "3"]
        assert cells[5] == "20" and cells[7].endswith("KiB")  # end offset; the leader replica's size

        follower = next(b for b in (1, 2, 3) if b != leader and b != controller)
        alone = f"console-rf1-{uuid.uuid4().hex[:6]}"  # its only replica is on the broker about to die
        admin.create_topics([NewTopic(alone, 1, replica_assignment=[[follower]])])[alone].result()
        cluster.wait_leader(alone, 0)
        cluster.kill9(follower)
        cluster.wait_isr(topic, 0, sorted({1, 2, 3} - {follower}))

        def shows_under_replicated() -> bool:  # brokers learn the ISR change from the controller shortly after
            listing = client.get("/topics").text
            return '<td class="num bad">1</td>' in re.search(rf'>{topic}</a>.*?</tr>', listing, re.S).group(0)

        cluster.wait_for(shows_under_replicated, 30, "the topics page counting 1 under-replicated partition")

        cluster.wait_for(lambda: re.search(r'id="offline-card">.*?<div class="value">1</div>', client.get("/").text,
                                           re.S) is not None, 30, "the overview counting 1 offline partition")
        overview = client.get("/").text
        health = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", re.search(r'id="health"[^>]*>(.*?)</div>', overview,
                                                                     re.S).group(1)))
        assert "1 partition(s) offline" in health and "under-replicated" in health
        assert alone in health and topic in health
        offline_page = client.get(f"/topics/{alone}").text
        assert '<tr class="offline">' in offline_page and "1 partition(s) offline" in offline_page
        browse = client.get(f"/topics/{alone}/messages")
        assert browse.status_code == 200 and "Partition(s) 0 offline (no leader): not read." in browse.text
        replicated = client.get(f"/topics/{topic}").text
        assert '<tr class="under-replicated">' in replicated and "badge warn\">under-replicated" in replicated
        listing = client.get("/topics").text
        assert re.search(rf'<tr data-name="{alone}" class="offline">', listing)
        assert re.search(rf'<tr data-name="{topic}" class="under-replicated">', listing)
        assert client.get(f"/brokers/{follower}").status_code == 404  # gone from the cluster's metadata
