"""Lets Spark find format ``strom`` without ``strom.spark.register(spark)``.

When a session first resolves a data source name, PySpark 4 imports every installed
top-level module named ``pyspark_*`` (in the Python that Spark runs for its workers) and
registers the ``DefaultSource`` each one exports. Importing must never fail: a failure
here makes Spark skip the look-up of every Python data source, not just this one.
"""

from __future__ import annotations

try:
    from strom.spark.source import StromDataSource as DefaultSource
except ImportError:  # pyspark or pyarrow missing from this Python: nothing to offer
    pass
else:
    __all__ = ["DefaultSource"]
