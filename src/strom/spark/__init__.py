"""Strom topics as a Spark data source and sink (format ``strom``).

Usage::

    import strom.spark
    strom.spark.register(spark)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "host:9092") \\
        .option("subscribe", "clicks").load()

The ``strom`` package must be importable by the Python that Spark's workers run
(``PYSPARK_PYTHON``); ``addPyFile`` is not enough for streaming queries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "FORMAT"]

FORMAT = "strom"


def register(spark: SparkSession) -> None:
    """Register format ``strom`` for readers and writers of this session."""
    from strom.spark.source import StromDataSource

    spark.dataSource.register(StromDataSource)
