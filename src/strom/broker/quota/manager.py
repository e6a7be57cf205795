"""ClientQuotaManager: one per kind of quota (produce bytes, fetch bytes, request time), as in Kafka.

Each keeps a Rate per quota entity (a user, a client id, or both, as the precedence rules decide) over
`quota.window.num` samples of `quota.window.size.seconds`. Recording a value that takes the rate over
the bound answers with the throttle time Kafka computes: how long the client must stay silent for its
rate over the window to fall back to the bound, `(rate - bound) / bound * window`.

A broker with no quota of a kind configured has `enabled` False for that kind, and the request path
checks only that flag: clients pay nothing for quotas nobody set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from strom.broker.quota.entity import (
    CLIENTS,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USERS,
    QuotaEntity,
    precedence,
    stored_entities,
)
from strom.broker.quota.rate import Rate

if TYPE_CHECKING:
    from strom.broker.request import RequestContext
    from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)

# A rate nobody recorded into for this long is dropped (Kafka expires idle quota sensors after an hour).
RATE_EXPIRY_MS = 3_600_000
_SWEEP_INTERVAL_MS = 60_000
# Request time is recorded as a percentage of one second: nanoseconds * 100 / 1e9.
NANOS_TO_PERCENTAGE = 100.0 / 1e9

Resolved = tuple[float, tuple[str, str]] | None  # (bound, rate key), or None: no quota for this client


def now_ms() -> float:
    return time.monotonic() * 1000.0


class ClientQuotaManager:
    """One kind of quota (its config key): configured bounds by entity, resolved per client, and rates."""

    def __init__(self, config_key: str, samples: int, window_seconds: int, max_throttle_ms: float | None = None) -> None:
        self.config_key = config_key
        self.samples = samples
        self.window_ms = window_seconds * 1000
        self.max_throttle_ms = max_throttle_ms
        self.enabled = False
        self._bounds: dict[QuotaEntity, float] = {}
        self._resolved: dict[tuple[str, str], Resolved] = {}
        self._rates: dict[tuple[str, str], Rate] = {}
        self._swept_ms = now_ms()
        # For metrics: how often clients were throttled and for how long in all (Kafka's throttle-time sensor).
        self.throttled_requests = 0
        self.throttle_time_ms_total = 0

    def update(self, bounds: Mapping[QuotaEntity, float]) -> None:
        """New configured bounds (after any entity change); rates carry on where the entity stays the same."""
        self._bounds = dict(bounds)
        self._resolved = {}
        self.enabled = bool(self._bounds)

    def quota(self, user: str, client_id: str) -> Resolved:
        """The client's bound and the key of the rate it counts against (KIP-55), cached until a change."""
        key = (user, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        found: Resolved = None
        for entity, rate_key in precedence(user, client_id):
            bound = self._bounds.get(entity)
            if bound is not None:
                found = (bound, rate_key)
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[key] = found
        return found

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float) -> int:
        """Record `value` against the client's quota; the throttle time in ms, 0 within the quota."""
        resolved = self.quota(user, client_id)
        if resolved is None:
            return 0
        bound, rate_key = resolved
        now = now_ms()
        rate = self._rate(rate_key, now)
        rate.record(value, now)
        return self._throttle_time(rate, bound, now)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        resolved = self.quota(user, client_id)
        if resolved is not None:
            rate = self._rates.get(resolved[1])
            if rate is not None:
                rate.unrecord(value, now_ms())

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """Most a client may take at once (Kafka caps a fetch's max bytes by this); None: unlimited."""
        resolved = self.quota(user, client_id)
        if resolved is None:
            return None
        return resolved[0] * (self.samples - 1) * self.window_ms / 1000

    def _throttle_time(self, rate: Rate, bound: float, now: float) -> int:
        measured = rate.measure(now)
        if measured <= bound:
            return 0
        throttle = (measured - bound) / bound * rate.window_size_ms(now)
        if self.max_throttle_ms is not None:
            throttle = min(throttle, self.max_throttle_ms)
        ms = int(round(throttle))
        if ms:
            self.throttled_requests += 1
            self.throttle_time_ms_total += ms
        return ms

    def _rate(self, key: tuple[str, str], now: float) -> Rate:
        rate = self._rates.get(key)
        if rate is None:
            if now - self._swept_ms >= _SWEEP_INTERVAL_MS:
                self._swept_ms = now
                self._rates = {k: r for k, r in self._rates.items() if now - r.last_record_ms < RATE_EXPIRY_MS}
            rate = self._rates[key] = Rate(self.samples, self.window_ms)
        return rate

    def rate_of(self, user: str, client_id: str) -> float:
        """The client's current rate (per second), 0 without a quota; for tests and diagnostics."""
        resolved = self.quota(user, client_id)
        rate = self._rates.get(resolved[1]) if resolved else None
        return rate.measure(now_ms()) if rate else 0.0


class QuotaManagers:
    """The three managers (Kafka's QuotaFactory.QuotaManagers), kept current from the entity configs."""

    def __init__(self, samples: int, window_seconds: int) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_seconds)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_seconds)
        # A request-time violation throttles for one window at most (Kafka's ClientRequestQuotaManager).
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples, window_seconds,
                                          max_throttle_ms=window_seconds * 1000)

    def load(self, store_configs: Mapping[str, Mapping[str, Mapping[str, str]]]) -> None:
        """Rebuild the bounds of every kind from {store type: {name: configs}}."""
        bounds: dict[str, dict[QuotaEntity, float]] = {m.config_key: {} for m in self.managers()}
        for entity, quotas in stored_entities(store_configs):
            for key, text in quotas.items():
                try:
                    value = float(text)
                except ValueError:
                    log.warning("ignoring quota %s=%r of %s: not a number", key, text, entity)
                    continue
                if value > 0:
                    bounds[key][entity] = value
        for manager in self.managers():
            manager.update(bounds[manager.config_key])

    def load_from(self, store: MetadataStore) -> None:
        """Read the users and clients entities of the metadata store (an in-memory read)."""
        self.load({USERS: store.all_entity_configs(USERS), CLIENTS: store.all_entity_configs(CLIENTS)})

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request

    @staticmethod
    def client_of(ctx: RequestContext) -> tuple[str, str]:
        """(user, client id) a request's quotas are looked up by: the principal's name, "" for no client id."""
        return ctx.session.principal.name, ctx.header.client_id or ""

    def record_request_time(self, ctx: RequestContext, nanos: int) -> int:
        user, client_id = self.client_of(ctx)
        return self.request.record_and_get_throttle_time_ms(user, client_id, nanos * NANOS_TO_PERCENTAGE)
