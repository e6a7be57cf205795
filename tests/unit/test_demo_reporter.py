"""The demo's progress lines (pipelines/clickstream.py Reporter), as printed to the terminal."""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "clickstream.py"


@pytest.fixture(scope="module")
def clickstream():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("clickstream_under_test", PIPELINE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _query(name: str, rows: int) -> SimpleNamespace:
    return SimpleNamespace(name=name, lastProgress={"batchId": 3, "numInputRows": rows,
                                                    "processedRowsPerSecond": 1.0})


def test_singulars_and_closed_windows_counted_by_window(clickstream, capsys: pytest.CaptureFixture[str]) -> None:
    reporter = clickstream.Reporter()
    w1 = (datetime(2026, 1, 1, 10, 0), datetime(2026, 1, 1, 10, 1))
    w2 = (datetime(2026, 1, 1, 10, 1), datetime(2026, 1, 1, 10, 2))
    views = [SimpleNamespace(window_start=w1[0], window_end=w1[1], page=p, views=1) for p in ("/", "/cart", "/buy")]
    views.append(SimpleNamespace(window_start=w2[0], window_end=w2[1], page="/", views=2))
    reporter.windows_closed(views)
    reporter.windows_closed(views[:1])  # a replayed batch: the same window again
    reporter.sessions_closed([SimpleNamespace(user="u1", clicks=1, duration_s=0.0)])
    reporter.progress([_query("page-views", 1)])
    out = capsys.readouterr().out
    assert "window 10:00-10:01 closed: 3 views on 3 pages" in out
    assert "window 10:01-10:02 closed: 2 views on 1 page;" in out
    assert "1 session closed; longest: u1 1 click over 0s" in out
    assert "page-views: batch 3 1 row " in out
    assert "closed windows 2 (5 page-view rows), sessions 1" in out
    assert "1 clicks" not in out and "1 sessions" not in out
