"""Process environment Spark needs before its JVM starts (used by the demo and the tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

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


class StromWorkerEnvironmentError(RuntimeError):
    """Spark's Python workers would not be able to import `strom`; the message says what to set."""


# What a worker needs to run the data source's tasks.
WORKER_MODULES = ("strom", "confluent_kafka", "pyarrow")
_CHECK = (
    "import importlib.util, sys\n"
    "missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]\n"
    "print(','.join(missing))\n"
)


def missing_modules(python: str, env: dict[str, str] | None = None) -> list[str] | None:
    """Modules of WORKER_MODULES that `python` cannot import, or None if it does not run at all.

    Run from a neutral directory so the current directory does not make `strom` importable
    by accident; PYTHONPATH is the one the JVM hands its Python workers.
    """
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as neutral:
        try:
            out = subprocess.run(
                [python, "-c", _CHECK, *WORKER_MODULES],
                cwd=neutral,
                env=env if env is not None else dict(os.environ),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    if out.returncode != 0:
        return None
    return [m for m in out.stdout.strip().split(",") if m]


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith(("local[", "local-cluster["))


def ensure_worker_python(sc: Any) -> None:
    """Make sure the Python Spark starts for workers can import `strom`, or say what to set.

    PySpark bakes ``sc.pythonExec`` (PYSPARK_PYTHON, default ``python3`` from PATH) into every
    Python function and data source when it is registered, so a script run with a virtualenv's
    Python without PYSPARK_PYTHON gets workers from another Python and fails deep inside a
    task with ``No module named 'strom'``. On a local master the workers run on this machine:
    when the user did not choose a worker Python, pointing it at this interpreter is safe and
    is done here (before the data source is registered). A Python the user chose explicitly
    is never replaced; then, and on cluster masters where the check would need the workers
    themselves, a clear error or warning is given instead.
    """
    master = str(sc.master)
    exe = str(sc.pythonExec)
    chosen = bool(os.environ.get("PYSPARK_PYTHON")) or bool(sc.getConf().get("spark.pyspark.python", None))
    if not _is_local(master):
        return  # workers are elsewhere; docs/spark.md says PYSPARK_PYTHON must have strom installed
    if getattr(sc, "_strom_checked_python", None) == exe:
        return  # one check per context and worker Python, not one per register() call
    missing = missing_modules(exe)
    if missing == []:
        sc._strom_checked_python = exe
        return
    what = "does not run" if missing is None else "cannot import " + ", ".join(missing)
    if not chosen and os.path.realpath(exe) != os.path.realpath(sys.executable):
        here = missing_modules(sys.executable)
        if here == []:
            sc.pythonExec = sys.executable
            os.environ["PYSPARK_PYTHON"] = sys.executable
            sc._strom_checked_python = sys.executable
            return
    source = "PYSPARK_PYTHON" if chosen else "the default worker Python (PYSPARK_PYTHON is unset)"
    raise StromWorkerEnvironmentError(
        f"Spark's Python workers run {exe!r} ({source}), which {what}. The strom data source runs "
        f"inside those workers. Set PYSPARK_PYTHON to a Python that has strom, confluent-kafka and "
        f"pyarrow installed (for example `export PYSPARK_PYTHON={sys.executable}`) before the "
        f"SparkSession is created, or install them into {exe!r}. If strom is importable here only "
        "through sys.path changes in your script, put its directory on PYTHONPATH instead."
    )
