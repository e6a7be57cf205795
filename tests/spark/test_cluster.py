"""Scale-out: the same source and sink on a standalone Spark cluster (master + one worker).

The cluster is started from the pyspark package's own jars on loopback, so reads and writes
run in a separate executor JVM and its Python workers, never in the driver.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import build_session, create_topic, produce_values, spark_env, strom_reader, unique
from tests.support.broker import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"spark daemon exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"port {port} did not open")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    import pyspark

    tmp = tmp_path_factory.mktemp("cluster")
    spark_env(tmp / "spark-conf")
    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOG_DIR": str(tmp / "logs"),
           "SPARK_WORKER_DIR": str(tmp / "work"), "SPARK_LOCAL_DIRS": str(tmp / "local")}
    spark_class = str(home / "bin" / "spark-class")
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(tmp / "master.log", "wb") as log:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(free_port())],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        procs.append(master)
        _wait_port(port, master)
        url = f"spark://127.0.0.1:{port}"
        with open(tmp / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                 "--memory", "2g", "--webui-port", str(free_port()), "--work-dir", str(tmp / "work"), url],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        procs.append(worker)
        yield url, tmp
    finally:
        for p in reversed(procs):
            _stop(p)


@pytest.fixture(scope="module")
def cluster_spark(cluster: tuple[str, Path]) -> Iterator[Any]:
    url, tmp = cluster
    session = build_session(
        url,
        tmp,
        **{
            "spark.executor.memory": "1g",
            "spark.executor.cores": "2",
            "spark.cores.max": "2",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        },
    )
    try:
        yield session
    finally:
        session.stop()


def test_source_and_sink_run_in_cluster_executors(cluster_spark: Any, bootstrap: str, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    spark = cluster_spark
    assert spark.sparkContext.master.startswith("spark://")
    src = create_topic(bootstrap, unique("cluster-src"), 4)
    dst = create_topic(bootstrap, unique("cluster-dst"), 2)
    produce_values(bootstrap, src, 4, 2000)

    pid = udf(lambda: os.getppid(), "int", useArrow=False)  # the executor-side worker daemon, not the driver
    df = strom_reader(spark, bootstrap, subscribe=src, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    rows = df.select("partition", "offset", pid().alias("ppid")).collect()
    assert len(rows) == 2000
    assert os.getpid() not in {r.ppid for r in rows}

    q = (
        strom_reader(spark, bootstrap, stream=True, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="700")
        .selectExpr("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [700, 700, 600]
    back = strom_reader(spark, bootstrap, subscribe=dst)
    assert back.count() == 2000
    assert back.selectExpr("count(distinct value)").first()[0] == 2000
