"""The order test modules start in under `pytest -n 2 --dist loadfile --no-loadscope-reorder`.

pytest-xdist hands whole modules to workers in collection order, each worker holding up to two
modules queued, and never takes back a queued one. Its default order (most tests first) puts the
few-test, long cluster and Spark modules last, so one worker can still run a minute-long module
while the other has nothing left. Longest first (the LPT rule) ends the run on many short unit
modules instead. A module's length is estimated from where it lives and how many test functions it has
(docs/decisions/0051-test-order.md has the figures); an estimate only orders, it asserts nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

# (seconds to start what the module shares, seconds per test function) by test directory, measured serially.
MODULE_COST: dict[str, tuple[float, float]] = {
    "cluster": (5.0, 10.0),  # a ZooKeeper + 3-broker cluster starts and stops in about 5 s
    "spark": (15.0, 4.0),  # a SparkSession per module
    "console": (3.0, 1.5),
    "integration": (2.0, 0.8),
    "unit": (0.0, 0.02),
}
_DEFAULT_COST = (2.0, 0.8)
# Modules far off the estimate (measured, serially, in seconds).
MEASURED_SECONDS: dict[str, float] = {
    "test_spark_cluster.py": 105.0,  # one test: a Spark streaming query on a 3-broker cluster through a leader kill
}


class HasPath(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def name(self) -> str: ...


def estimated_seconds(path: Path, tests: int) -> float:
    if path.name in MEASURED_SECONDS:
        return MEASURED_SECONDS[path.name]
    start, per_test = MODULE_COST.get(path.parent.name, _DEFAULT_COST)
    return start + per_test * tests


def longest_modules_first(items: Sequence[HasPath]) -> list[HasPath]:
    """`items` reordered so the modules estimated longest come first; a module's tests stay together
    and in their order (the sort is stable and every test of a module has the same key)."""
    # Test functions, not parametrized cases: the cases of one function are mostly quick variations.
    tests = Counter(path for path, _ in {(item.path, getattr(item, "originalname", item.name)) for item in items})
    first_seen = {path: i for i, path in reversed(list(enumerate(item.path for item in items)))}

    def key(item: HasPath) -> tuple[float, int]:
        return -estimated_seconds(item.path, tests[item.path]), first_seen[item.path]

    return sorted(items, key=key)
