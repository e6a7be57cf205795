"""Strom topics as a Spark data source and sink (format ``strom``).

Usage::

    import strom.spark
    strom.spark.register(spark)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "host:9092") \\
        .option("subscribe", "clicks").load()

The ``strom`` package must be importable by the Python that Spark's workers run
(``PYSPARK_PYTHON``); ``addPyFile`` is not enough for streaming queries. ``register``
checks that on a local master: it points the workers at this Python when the user chose
none, and otherwise stops with a message saying what to set.
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

    spark.dataSource.register(StromDataSource)
