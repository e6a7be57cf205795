"""The order `make test` starts test modules in: longest first, each module's tests together and in order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.scheduling import longest_modules_first


@dataclass(frozen=True)
class FakeItem:
    path: Path
    name: str
    originalname: str


def items(module: str, *functions: str, cases: int = 1) -> list[FakeItem]:
    path = Path("tests") / module
    return [FakeItem(path, f"{f}[{i}]" if cases > 1 else f, f) for f in functions for i in range(cases)]


def modules(ordered: list[FakeItem]) -> list[str]:
    seen: list[str] = []
    for item in ordered:
        name = f"{item.path.parent.name}/{item.path.name}"
        if not seen or seen[-1] != name:
            seen.append(name)
    return seen


def test_cluster_and_spark_modules_start_before_the_many_short_unit_modules() -> None:
    collected = (items("unit/test_a.py", *(f"test_{i}" for i in range(40)))
                 + items("cluster/test_one.py", "test_fail_over")
                 + items("integration/test_b.py", "test_x", "test_y")
                 + items("spark/test_c.py", "test_stream", "test_sink")
                 + items("cluster/test_three.py", "test_1", "test_2", "test_3"))
    assert modules(longest_modules_first(collected)) == [
        "cluster/test_three.py", "spark/test_c.py", "cluster/test_one.py", "integration/test_b.py", "unit/test_a.py"]


def test_parametrized_cases_count_as_one_function() -> None:
    """300 cases of one integration function against one broker are not a long module."""
    collected = items("integration/test_matrix.py", "test_version", cases=300) + items(
        "cluster/test_two.py", "test_1", "test_2")
    assert modules(longest_modules_first(collected)) == ["cluster/test_two.py", "integration/test_matrix.py"]


def test_a_modules_tests_stay_together_and_in_their_order() -> None:
    collected = items("unit/test_u.py", "test_b", "test_a") + items("unit/test_v.py", "test_d", "test_c")
    ordered = longest_modules_first(collected)
    assert [i.name for i in ordered] == ["test_b", "test_a", "test_d", "test_c"]


def test_a_module_measured_far_off_the_estimate_goes_by_its_measurement() -> None:
    collected = (items("cluster/test_faults_like.py", "test_1", "test_2", "test_3")
                 + items("cluster/test_spark_cluster.py", "test_query_survives"))
    assert modules(longest_modules_first(collected))[0] == "cluster/test_spark_cluster.py"
