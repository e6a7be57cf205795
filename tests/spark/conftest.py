"""Spark test fixtures: one local[2] SparkSession per test module, a real broker, helpers.

Set STROM_SPARK_TEST_BOOTSTRAP=host:port to run these tests against an already-running
Kafka-compatible broker instead of the `broker` fixture's subprocess (for development).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from strom.spark.environment import prepare_spark_environment  # noqa: E402


def spark_env(conf_dir: Path) -> None:
    """Environment the JVM and Python workers need; must be set before the JVM starts."""
    prepare_spark_environment(conf_dir, force=True)


def build_session(master: str, tmp: Path, **conf: str) -> Any:
    from pyspark.sql import SparkSession

    import strom.spark

    spark_env(tmp / "spark-conf")
    builder = (
        SparkSession.builder.master(master)
        .appName("strom-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.local.dir", str(tmp / "spark-local"))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    return spark


@pytest.fixture(scope="module")
def bootstrap(request: pytest.FixtureRequest) -> str:
    external = os.environ.get("STROM_SPARK_TEST_BOOTSTRAP")
    if external:
        return external
    return request.getfixturevalue("broker").bootstrap


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    session = build_session("local[2]", tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="strom-spark-") as d:
        yield Path(d)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> str:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)  # must outlive the futures
    fs = client.create_topics([NewTopic(name, partitions, 1, config=config or {})], request_timeout=30)
    for f in fs.values():
        f.result(timeout=30)
    wait_for_partitions(bootstrap, name, partitions)
    return name


def wait_for_partitions(bootstrap: str, topic: str, partitions: int, timeout: float = 20) -> None:
    a = admin(bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = a.list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) >= partitions:
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} did not get {partitions} partitions")


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]],
    **conf: Any,
) -> int:
    """Produce (key, value, partition, headers) records and wait for every acknowledgement."""
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **conf})
    n = 0
    for key, value, part, headers in records:
        kwargs: dict[str, Any] = {}
        if part is not None:
            kwargs["partition"] = part
        if headers:
            kwargs["headers"] = headers
        p.produce(topic, value, key, on_delivery=lambda e, m: errors.append(str(e)) if e else None, **kwargs)
        n += 1
        if n % 10_000 == 0:
            p.poll(0)
    left = p.flush(60)
    assert left == 0 and not errors, (left, errors[:3])
    return n


def produce_values(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> int:
    """count records spread round-robin over partitions; value = b'v<i>' with i from start."""
    return produce(
        bootstrap,
        topic,
        ((f"k{i}".encode(), f"v{i}".encode(), i % partitions, None) for i in range(start, start + count)),
    )


def strom_reader(spark: Any, bootstrap: str, stream: bool = False, **options: str) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()

