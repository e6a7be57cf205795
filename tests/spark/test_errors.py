"""What a person sees when a Spark job gets something wrong: one actionable line, quickly.

One user job runs as a separate process (its own JVM, its stderr captured, never calling
``strom.spark.register``) and tries each mistake in turn; the tests assert on what it printed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, produce_values, unique
from tests.support.broker import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = r'''
import sys, time
from pyspark.sql import SparkSession

bootstrap, closed, topic, no_autocreate = sys.argv[1:5]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def step(name, fn):
    print(f"== {name}", flush=True)
    print(f"== {name}", file=sys.stderr, flush=True)
    began = time.monotonic()
    try:
        print(f"{name} RESULT {fn()}", flush=True)
    except Exception as exc:
        text = str(exc).replace("\n", "\\n")
        print(f"{name} ERROR {type(exc).__name__} {time.monotonic() - began:.1f}s {text}", flush=True)

def read(servers=bootstrap, **options):
    r = spark.read.format("strom").option("kafka.bootstrap.servers", servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load().count()

def write(servers, target):
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    df.write.format("strom").option("kafka.bootstrap.servers", servers).option("topic", target).mode("append").save()
    return read(servers, subscribe=target)

step("found", lambda: read(subscribe=topic))
step("no-subscribe", lambda: read())
step("unreachable", lambda: read(closed, subscribe=topic))
step("unreachable-write", lambda: write(closed, topic))
step("group-id", lambda: read(subscribe=topic, **{"kafka.group.id": "ported-job"}))
step("missing-topic", lambda: read(subscribe=topic + "-nope"))
def stream(**options):
    r = spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    q = r.load().writeStream.format("noop").trigger(availableNow=True).start()
    q.awaitTermination(120)
    return q.exception()

step("stream-option", lambda: stream(subscribe=topic, endingOffsets="latest"))
step("missing-topic-stream", lambda: stream(subscribe=topic + "-nope"))

step("missing-topic-lenient", lambda: read(subscribe=topic + "-nope", failOnDataLoss="false"))
step("autocreate", lambda: write(bootstrap, topic + "-new"))
step("no-autocreate", lambda: write(no_autocreate, topic + "-new"))
spark.stop()
'''


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


@pytest.fixture(scope="module")
def job(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Output]:
    """Run the job once; ``job.out(step)`` is the step's result line, ``job.err(step)`` its stderr."""
    strict = BrokerProcess(tmp_path_factory.mktemp("broker"), {"auto.create.topics.enable": False}).start()
    try:
        yield _run_job(bootstrap, strict.bootstrap, tmp_path_factory.mktemp("errors-job"))
    finally:
        strict.close()


def _run_job(bootstrap: str, strict: str, tmp: Path) -> _Output:
    topic = create_topic(bootstrap, unique("errors"), 1)
    produce_values(bootstrap, topic, 1, 3)
    script = tmp / "user_job.py"
    script.write_text(JOB)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    run = subprocess.run([sys.executable, str(script), bootstrap, f"127.0.0.1:{_closed_port()}", topic,
                          strict], cwd=tmp, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    return _Output(run, topic)


class _Output:
    def __init__(self, run: subprocess.CompletedProcess[str], topic: str) -> None:
        self.run = run
        self.topic = topic

    def out(self, step: str) -> str:
        found = re.search(rf"^{re.escape(step)} (RESULT|ERROR) (.*)$", self.run.stdout, re.M)
        assert found, self.run.stdout[-3000:] + self.run.stderr[-3000:]
        return f"{found.group(1)} {found.group(2)}"

    def err(self, step: str) -> str:
        parts = re.split(r"^== (\S+)$", self.run.stderr, flags=re.M)
        return dict(zip(parts[1::2], parts[2::2], strict=False)).get(step, "")


def test_unreachable_broker_names_address_and_option_quickly(job: _Output) -> None:
    for step in ("unreachable", "unreachable-write"):
        line = job.out(step)
        assert line.startswith("ERROR AnalysisException"), line
        assert re.search(r"could not reach a broker at 127\.0\.0\.1:\d+ \(kafka\.bootstrap\.servers\)", line), line
        assert "Traceback" not in line and "KafkaError" not in line, line
        assert "rdkafka" not in job.err(step) and "%3|" not in job.err(step), job.err(step)[:2000]


def test_option_error_is_the_message_not_a_traceback(job: _Output) -> None:
    line = job.out("no-subscribe")
    assert "StromOptionError: Exactly one of the options 'subscribe', 'subscribePattern' or 'assign'" in line, line
    assert "Traceback" not in line and 'File "' not in line, line
    line = job.out("stream-option")  # a streaming query reports it from the query
    assert "StromOptionError: Option 'endingoffsets' is not supported for streaming queries." in line, line
    assert "Traceback" not in line and "UnboundLocalError" not in line, line


def test_kafka_group_id_is_accepted_with_a_warning(job: _Output) -> None:
    assert job.out("group-id") == "RESULT 3"
    assert "Option 'kafka.group.id' (ported-job) is not used" in job.err("group-id")


def test_format_strom_is_found_without_register(job: _Output) -> None:
    # The job never calls strom.spark.register(spark): Spark found pyspark_strom by itself.
    assert "DATA_SOURCE_NOT_FOUND" not in job.run.stdout + job.run.stderr
    assert job.out("found") == "RESULT 3"


def test_missing_topic_fails_or_waits_like_spark(job: _Output) -> None:
    line = job.out("missing-topic")
    assert f"Subscribed topic '{job.topic}-nope' (option 'subscribe') does not exist" in line, line
    assert "Traceback" not in line, line
    line = job.out("missing-topic-stream")
    assert f"Subscribed topic '{job.topic}-nope' (option 'subscribe') does not exist" in line, line
    assert "Traceback" not in line, line
    assert job.out("missing-topic-lenient") == "RESULT 0"
    assert f"Subscribed topic '{job.topic}-nope' does not exist yet" in job.err("missing-topic-lenient")


def test_sink_auto_creation_follows_the_broker_and_is_logged(job: _Output) -> None:
    assert job.out("autocreate") == "RESULT 2"
    assert (f"topic '{job.topic}-new' did not exist; the broker created it with 1 partition(s)"
            in job.err("autocreate")), job.err("autocreate")[-2000:]
    line = job.out("no-autocreate")
    assert f"Topic '{job.topic}-new' (option 'topic') does not exist and the broker did not create it" in line, line
    assert "auto.create.topics.enable" in line and "Traceback" not in line, line
