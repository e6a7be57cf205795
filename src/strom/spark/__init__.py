"""Strom topics as a Spark data source and sink (format ``strom``).

Usage::

    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "host:9092") \\
        .option("subscribe", "clicks").load()

Spark 4 finds format ``strom`` by itself when the Python it runs for workers
(``PYSPARK_PYTHON``, else ``python3`` on the PATH) has strom installed: it registers the
``DefaultSource`` of the installed module ``pyspark_strom``. ``strom.spark.register(spark)``
is needed when that Python lacks strom (a virtualenv's Python running the script while
``python3`` is another one): on a local master it points the workers at this Python when the
user chose none, otherwise it stops with a message saying what to set, and it registers the
format for the session. ``addPyFile`` is not enough for streaming queries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.spark.environment import StromWorkerEnvironmentError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "FORMAT", "StromWorkerEnvironmentError"]

FORMAT = "strom"


def register(spark: SparkSession, *, check_workers: bool = True) -> None:
    """Register format ``strom`` for readers and writers of this session.

    With ``check_workers`` (default), first make sure Spark's Python workers can import
    ``strom`` (see ``strom.spark.environment.ensure_worker_python``); raises
    ``StromWorkerEnvironmentError`` with what to set when they cannot.
    """
    from strom.spark.environment import ensure_worker_python
    from strom.spark.source import StromDataSource

    if check_workers:
        ensure_worker_python(spark.sparkContext)

    if _found_by_spark(spark):
        return  # registering again would only log that it replaced Spark's static registration
    spark.dataSource.register(StromDataSource)


def _found_by_spark(spark: SparkSession) -> bool:
    """Whether the session already resolves format ``strom`` (found at start-up, or registered)."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(FORMAT))
    except Exception:  # noqa: BLE001 - Spark Connect or an internal change: just register
        return False
