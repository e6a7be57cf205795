"""Client quotas: the sampled rate, Kafka's throttle-time formula, and KIP-55's precedence order."""

from __future__ import annotations

import pytest
from tests.support.fake_clock import FakeClock

from strom.broker.quota import manager as quota_manager
from strom.broker.quota.entity import CLIENTS, DEFAULT, USERS, QuotaEntity, desanitize, sanitize
from strom.broker.quota.manager import ClientQuotaManager, QuotaManagers
from strom.broker.quota.rate import Rate


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock(1_000_000)
    monkeypatch.setattr(quota_manager, "now_ms", c)
    return c


def test_rate_spreads_a_first_burst_over_the_whole_window() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000, 0)
    # One sample old: still counted as (11 - 1) windows = 10 s.
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(1000.0)


def test_rate_over_many_samples_and_expiry() -> None:
    rate = Rate(samples=3, window_ms=1000)
    for t in range(0, 5000, 100):  # 100 bytes every 100 ms = 1000 B/s
        rate.record(100, t)
    # Three samples kept, the oldest started at 2000: 2.9 s covered.
    assert rate.window_size_ms(4900) == pytest.approx(2900)
    assert rate.measure(4900) == pytest.approx(3000 / 2.9)  # 10 records of 100 B per sample
    # Long after the last record every sample has expired.
    assert rate.total(100_000) == 0
    assert rate.measure(100_000) == 0


def test_throttle_time_is_kafkas_formula(clock: FakeClock) -> None:
    m = ClientQuotaManager("producer_byte_rate", samples=11, window_seconds=1)
    m.update({QuotaEntity(None, "app"): 1000.0})
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "app", 5_000) == 0  # 500 B/s over 10 s
    clock.now += 500
    # 20,000 B over 10.5 s (0.5 s elapsed, padded by 10 windows): (1904.8 - 1000) / 1000 * 10.5 s = 9.5 s,
    # the time after which 20,000 B would be 1000 B/s over the window.
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "app", 15_000) == 9_500
    assert (m.throttled_requests, m.throttle_time_ms_total) == (1, 9_500)
    assert m.rate_of("ANONYMOUS", "app") == pytest.approx(20_000 / 10.5, rel=1e-6)
    # Once the samples have aged out, a small request is within the quota again.
    clock.now += 12_000
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "app", 100) == 0


def test_no_quota_means_no_rate_kept(clock: FakeClock) -> None:
    m = ClientQuotaManager("producer_byte_rate", samples=11, window_seconds=1)
    m.update({QuotaEntity(None, "other"): 10.0})
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "app", 10**9) == 0
    assert m.quota("ANONYMOUS", "app") is None
    assert not m._rates


def test_request_time_throttle_is_capped_at_one_window(clock: FakeClock) -> None:
    q = QuotaManagers(samples=11, window_seconds=1)
    q.load({CLIENTS: {"app": {"request_percentage": "1"}}})
    assert q.request.enabled and not q.produce.enabled
    # 10 s of handler time in one go is 1000 % over the window: capped at one window.
    assert q.request.record_and_get_throttle_time_ms("ANONYMOUS", "app", 10 * 1e9 * quota_manager.NANOS_TO_PERCENTAGE) == 1000


def test_unrecord_takes_back_a_fetch_that_was_not_returned(clock: FakeClock) -> None:
    m = ClientQuotaManager("consumer_byte_rate", samples=11, window_seconds=1)
    m.update({QuotaEntity(DEFAULT, None): 100.0})
    assert m.record_and_get_throttle_time_ms("bob", "c1", 5000) > 0
    m.unrecord("bob", "c1", 5000)
    assert m.rate_of("bob", "c1") == 0
    assert m.max_value_in_window("bob", "c1") == 1000  # 100 B/s * 10 windows of 1 s


# Every level of KIP-55, most specific first: (entity, rate key shared by the clients it covers).
LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", DEFAULT), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "")),
    (QuotaEntity(DEFAULT, "app"), ("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
    (QuotaEntity(DEFAULT, None), ("alice", "")),
    (QuotaEntity(None, "app"), ("", "app")),
    (QuotaEntity(None, DEFAULT), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_picks_the_most_specific_configured_level(level: int) -> None:
    m = ClientQuotaManager("producer_byte_rate", samples=11, window_seconds=1)
    # Configure this level and every less specific one, each with a distinct bound.
    m.update({entity: float(i + 1) for i, (entity, _) in enumerate(LEVELS) if i >= level})
    bound, key = m.quota("alice", "app")
    assert bound == level + 1
    assert key == LEVELS[level][1]
    # Another user's other client is covered only by the default levels at or below.
    other = m.quota("bob", "web")
    expected = next((i for i in range(level, len(LEVELS)) if DEFAULT in (LEVELS[i][0].user, LEVELS[i][0].client_id)
                     and LEVELS[i][0].user in (DEFAULT, None) and LEVELS[i][0].client_id in (DEFAULT, None)), None)
    assert (other[0] if other else None) == (expected + 1 if expected is not None else None)


def test_user_quota_is_shared_by_all_clients_of_the_user(clock: FakeClock) -> None:
    m = ClientQuotaManager("producer_byte_rate", samples=2, window_seconds=1)
    m.update({QuotaEntity("alice", None): 1000.0})
    assert m.record_and_get_throttle_time_ms("alice", "a", 900) == 0
    assert m.record_and_get_throttle_time_ms("alice", "b", 900) > 0  # same rate: 1800 B in one window


def test_load_reads_the_store_layout_and_ignores_other_keys() -> None:
    q = QuotaManagers(samples=11, window_seconds=1)
    q.load({
        USERS: {"<default>": {"consumer_byte_rate": "2000"},
                f"{sanitize('User/x')}/clients/{sanitize('app 1')}": {"producer_byte_rate": "100"},
                "carol": {"SCRAM-SHA-256": "salt=..."}},
        CLIENTS: {"<default>": {"producer_byte_rate": "bogus"}},
    })
    assert q.produce.quota("User/x", "app 1") == (100.0, ("User/x", "app 1"))
    assert q.produce.quota("carol", "app") is None
    assert q.fetch.quota("carol", "app") == (2000.0, ("carol", ""))
    assert not q.request.enabled


def test_sanitize_round_trip_and_store_keys() -> None:
    for name in ["alice", "a/b", "x y*~", "<default>", "ünï"]:
        assert desanitize(sanitize(name)) == name
        assert "/" not in sanitize(name)
    assert QuotaEntity("a/b", DEFAULT).store_key() == (USERS, "a%2Fb/clients/<default>")
    assert QuotaEntity(None, "c").store_key() == (CLIENTS, "c")
    assert QuotaEntity.from_store(USERS, "a%2Fb/clients/<default>") == QuotaEntity("a/b", DEFAULT)
