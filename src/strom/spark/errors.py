"""Errors a person can act on, and how they reach the person running the Spark job.

A data source runs in Python workers started by the JVM; whatever it raises comes back as
the text of an ``AnalysisException`` (planning) or a task failure, preceded by the worker's
Python traceback. For a mistake in the job (an option, an address, a topic name) those
frames say nothing useful and push the one line that matters down the screen.

PySpark formats a worker's exception in ``handle_worker_exception`` and leaves the traceback
out when the worker's environment has ``SPARK_HIDE_TRACEBACK`` set (Spark sets it from
``spark.sql.execution.pyspark.udf.hideTraceback.enabled``). A worker exits right after
reporting an exception, so setting it in the failing worker, for a ``StromUserError`` only,
changes how that one error is shown and nothing else: the message becomes
``[PYTHON_DATA_SOURCE_ERROR] Failed to ...: strom.spark.options.StromOptionError: <what to fix>``.
Any other exception (a bug) keeps its traceback.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class StromUserError(Exception):
    """A mistake in the job or its environment that the message alone explains."""


class StromBrokerUnreachableError(StromUserError, ConnectionError):
    """No address of ``kafka.bootstrap.servers`` accepted a connection."""


class StromTopicNotFoundError(StromUserError):
    """A topic the job names does not exist (and will not be created)."""


def hide_traceback() -> None:
    """Have PySpark report the exception being raised in this worker without its traceback."""
    os.environ["SPARK_HIDE_TRACEBACK"] = "1"


def user_facing(fn: Callable[P, R]) -> Callable[P, R]:
    """Show a ``StromUserError`` raised by ``fn`` without the worker's traceback (see module doc).

    Works for generator functions too (a task's ``read``), where the error comes while iterating."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except StromUserError:
                hide_traceback()
                raise

        return generator  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except StromUserError:
            hide_traceback()
            raise

    return wrapper
