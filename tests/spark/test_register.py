"""`strom.spark.register` and the worker Python: a user's script run without PYSPARK_PYTHON.

The scripts run as separate processes (their own JVM), because the worker Python is fixed
when a SparkContext starts. A stand-in "python3" first on PATH is a Python that cannot
import strom or its dependencies (no site-packages, no PYTHONPATH), as when a virtualenv's
Python runs a script and Spark picks the system's python3 for its workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, unique

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = """
import sys
from pyspark.sql import SparkSession
import strom.spark

bootstrap, topic = sys.argv[1:3]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
try:
    strom.spark.register(spark)
except strom.spark.StromWorkerEnvironmentError as exc:
    print("STROM-ERROR:", exc, flush=True)
    sys.exit(3)
df = spark.createDataFrame([("a",), ("b",), ("c",)], "value string")
df.write.format("strom").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode("append").save()
n = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load().count()
print("COUNT", n, flush=True)
spark.stop()
"""


def _run(tmp: Path, bootstrap: str, topic: str, pyspark_python: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text(f'#!/bin/sh\nexec env -u PYTHONPATH "{sys.executable}" -S "$@"\n')
    fake.chmod(0o755)
    script = tmp / "user_job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    if pyspark_python:
        env["PYSPARK_PYTHON"] = str(fake)
    return subprocess.run(
        [sys.executable, str(script), bootstrap, topic],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=240, check=False,
    )


def test_unset_pyspark_python_is_set_to_this_python(bootstrap: str, workdir: Path) -> None:
    topic = create_topic(bootstrap, unique("reg"), 1)
    out = _run(workdir, bootstrap, topic, pyspark_python=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "COUNT 3" in out.stdout


def test_explicit_worker_python_without_strom_stops_with_a_message(bootstrap: str, workdir: Path) -> None:
    out = _run(workdir, bootstrap, unique("reg"), pyspark_python=True)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-4000:]
    assert "STROM-ERROR" in out.stdout
    assert "cannot import strom" in out.stdout
    assert f"export PYSPARK_PYTHON={sys.executable}" in out.stdout
    assert "ModuleNotFoundError" not in out.stdout + out.stderr
