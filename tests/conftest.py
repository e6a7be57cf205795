"""Shared fixtures: real broker subprocesses on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.broker import BrokerProcess
from tests.support.cluster import ClusterProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module (start-up is cheap, but isolation between modules matters)."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker"))
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with custom config overrides: `broker_factory(**{"log.segment.bytes": 4096})`."""
    started: list[BrokerProcess] = []

    def make(overrides: dict[str, object] | None = None, start: bool = True) -> BrokerProcess:
        b = BrokerProcess(tmp_path_factory.mktemp("broker"), overrides)
        started.append(b)
        return b.start() if start else b

    yield make
    for b in started:
        b.close()


@pytest.fixture(scope="session")
def hostile_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by fuzz examples (hypothesis re-runs the test body many times)."""
    b = BrokerProcess(tmp_path_factory.mktemp("hostile"))
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def cluster_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ClusterProcess]]:
    """Build clusters: `cluster_factory(3, overrides={...}, session_timeout_ms=...)`; all closed afterwards.

    Keyword arguments go to ClusterProcess; `start=False` returns it unstarted.
    """
    made: list[ClusterProcess] = []

    def make(brokers: int = 3, start: bool = True, **kwargs: object) -> ClusterProcess:
        cluster = ClusterProcess(tmp_path_factory.mktemp("cluster"), brokers, **kwargs)  # type: ignore[arg-type]
        made.append(cluster)
        return cluster.start() if start else cluster

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """Three brokers and one ZooKeeper shared by a test module (tests must leave every broker running)."""
    cluster = ClusterProcess(tmp_path_factory.mktemp("cluster3"), 3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()
