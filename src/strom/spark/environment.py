"""Process environment Spark needs before its JVM starts (used by the demo and the tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Errors only, on stderr, so a pipeline's own progress lines stay readable on stdout.
LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def prepare_spark_environment(conf_dir: Path, *, force: bool = False) -> None:
    """Write a quiet log4j config and point Spark at it, at loopback and at this Python.

    Workers must run the Python that has `strom` installed (PYSPARK_PYTHON); without
    `force`, values the user already exported win.
    """
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "log4j2.properties").write_text(LOG4J)
    values = {
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    for key, value in values.items():
        if force:
            os.environ[key] = value
        else:
            os.environ.setdefault(key, value)
