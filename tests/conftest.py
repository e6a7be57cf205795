"""Shared fixtures: real broker subprocesses on loopback."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import pytest

from strom.metadata.zk.zookeeper_server import ZooKeeperServer, start_ensemble, zookeeper_available
from tests.support.broker import BrokerProcess
from tests.support.cluster import ClusterProcess
from tests.support.scheduling import longest_modules_first
from tests.support.stalls import FAIL_ON_STALL, STALL_WARN_MS, is_known_unfixed, new_stall_reports

_STALL_CHECKED_DIRS = ("integration", "cluster")

# Markers by where a test lives or what it uses, so `make test-fast` (-m "not slow and not cluster and
# not spark and not browser") cannot start a cluster, a SparkSession or Chromium by accident.
_MARKERS_BY_DIR = {"cluster": "cluster", "spark": "spark"}
_MARKERS_BY_FIXTURE = {"cluster_factory": "cluster", "cluster3": "cluster", "spark": "spark",
                       "chromium": "browser"}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Runs as each test is collected, before any pytest_collection_modifyitems (`-m` selection)."""
    wanted = {_MARKERS_BY_DIR.get(item.path.parent.name)}
    wanted |= {_MARKERS_BY_FIXTURE.get(name) for name in getattr(item, "fixturenames", ())}
    for name in sorted(m for m in wanted if m and item.get_closest_marker(m) is None):
        item.add_marker(name)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first, so that `make test`'s two workers finish together (tests/support/scheduling.py)."""
    items[:] = longest_modules_first(items)


@pytest.fixture(autouse=True)
def no_loop_stalls(request: pytest.FixtureRequest) -> Iterator[None]:
    """Integration and cluster tests fail when a broker they use blocked its event loop
    (docs/decisions/0025-threading-model.md); the broker's WARN names the blocking stack."""
    checked = FAIL_ON_STALL and request.node.path.parent.name in _STALL_CHECKED_DIRS
    earlier = _failing(new_stall_reports())
    if checked and earlier:
        pytest.fail(_stall_message("while this test's fixtures started (or since the previous test)", earlier),
                    pytrace=False)
    yield
    reports = _failing(new_stall_reports())
    if checked and reports:
        pytest.fail(_stall_message("during this test", reports), pytrace=False)


def _failing(reports: list[str]) -> list[str]:
    """Stalls of known, not yet fixed violations become warnings; the rest fail the test."""
    for report in reports:
        if is_known_unfixed(report):
            warnings.warn(f"known loop stall (not fixed yet): {report}", stacklevel=2)
    return [r for r in reports if not is_known_unfixed(r)]


def _stall_message(when: str, reports: list[str]) -> str:
    return (f"a broker's event loop stalled for more than {STALL_WARN_MS} ms {when} "
            "(STROM_STALL_FAIL=0 to only log it):\n\n" + "\n\n".join(reports))


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


def _require_zookeeper() -> None:
    """Skip where ZooKeeper is not installed, except in CI, which installs it (.ci/run)."""
    if not zookeeper_available():
        message = "ZooKeeper not installed (apt-get install zookeeper, or set STROM_ZOOKEEPER_CLASSPATH)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper server on loopback, one per test module."""
    _require_zookeeper()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ZooKeeperServer]]:
    """Start extra standalone servers: `zookeeper_factory()`; all are stopped after the test."""
    _require_zookeeper()
    started: list[ZooKeeperServer] = []

    def make(start: bool = True, **kwargs: object) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server.start() if start else server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ZooKeeperServer]]:
    """A three-server ensemble on loopback, stopped after the test."""
    _require_zookeeper()
    servers = start_ensemble(tmp_path_factory.mktemp("ensemble"), n=3)
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


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
