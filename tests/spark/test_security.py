"""Spark over a SASL_SSL listener with the options Spark's own Kafka source takes: kafka.security.protocol,
kafka.sasl.mechanism, kafka.sasl.jaas.config and a PEM kafka.ssl.truststore.location."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli import strom
from tests.integration.test_tls import TlsBroker, start_tls_broker
from tests.support.security import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    t = start_tls_broker(tmp_path_factory.mktemp("spark-tls"))
    done = strom("configs", "--bootstrap-server", t.broker.bootstrap, "--alter", "--add-config",
                 "SCRAM-SHA-512=[password=spark-secret]", "--entity-type", "users", "--entity-name", "spark")
    assert done.returncode == 0, done.stderr
    try:
        yield t
    finally:
        t.broker.close()


def spark_options(t: TlsBroker) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": f"127.0.0.1:{t.ports['SASL_SSL']}",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="spark" password="spark-secret";',
        "kafka.ssl.truststore.location": str(t.ca.ca_file),
    }


def test_spark_writes_and_reads_over_sasl_ssl_with_scram(spark: Any, secured: TlsBroker, tmp_path: Path) -> None:
    auth = secured.auth("SASL_SSL", mechanism="SCRAM-SHA-512", username="spark", password="spark-secret")
    topic = create_topic(auth, partitions=2)
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string")
    writer = df.write.format("strom").mode("append").option("topic", topic)
    for k, v in spark_options(secured).items():
        writer = writer.option(k, v)
    writer.save()
    reader = spark.read.format("strom").option("subscribe", topic)
    for k, v in spark_options(secured).items():
        reader = reader.option(k, v)
    got = sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in reader.load().collect())
    assert got == sorted(rows)
