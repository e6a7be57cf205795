"""RequestMetrics: per-API request counts, error counts and latency histograms (Kafka's RequestMetrics).

Updated once per request on the loop, so it keeps plain lists and dicts and no locks; the
collector turns them into Prometheus families at scrape time. A request's time splits as in
Kafka: queue (received -> handler starts), local (handler, minus purgatory waits), remote
(waiting in a purgatory: acks=all produce, long-poll fetch), response send (answer ready ->
handed to the socket) and total.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import kafka.errors as Errors

from strom.protocol.api_keys import ApiKey

# Histogram bucket upper bounds, in seconds (shown in ms): 50 µs .. 30 s.
BUCKETS_MS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
                                 5000, 10000, 30000)
_BOUNDS_S: tuple[float, ...] = tuple(b / 1000 for b in BUCKETS_MS)
_NB = len(_BOUNDS_S) + 1  # + the +Inf bucket
# The five time histograms of a request, in the order their counts sit in ApiStats.buckets.
TIMES = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems", "totaltimems")
QUEUE, LOCAL, REMOTE, SEND, TOTAL = range(5)


# Kafka's current names where kafka-python still has an older one.
_ERROR_NAMES = {-1: "UNKNOWN_SERVER_ERROR", 6: "NOT_LEADER_OR_FOLLOWER"}


def error_name(code: int) -> str:
    """Kafka's name of an error code (Errors enum), as the `error` label of ErrorsPerSec."""
    name = _ERROR_NAMES.get(code)
    if name is None:
        cls = Errors.for_code(code)
        name = cls.message if getattr(cls, "errno", None) == code else str(code)
    return name


def api_name(api_key: int) -> str:
    """Kafka's name of an API (ApiKeys.name): LIST_OFFSETS -> ListOffsets."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


@dataclass(slots=True)
class ApiStats:
    """One API's counters: requests per version, errors per code, five histograms (flat bucket counts)."""

    name: str
    versions: dict[int, int] = field(default_factory=dict)
    errors: dict[int, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * (_NB * len(TIMES)))
    sums: list[float] = field(default_factory=lambda: [0.0] * len(TIMES))  # seconds


class RequestMetrics:
    """All APIs' ApiStats, indexed by API key."""

    def __init__(self) -> None:
        self._apis: dict[int, ApiStats] = {}

    def stats(self, api_key: int) -> ApiStats:
        st = self._apis.get(api_key)
        if st is None:
            st = self._apis[api_key] = ApiStats(api_name(api_key))
        return st

    def record(self, api_key: int, version: int, received: float, started: float, local_done: float,
               remote: float, done: float) -> None:
        """One request answered (monotonic seconds): local work ran from `started` to `local_done`, then it
        waited `remote` in a purgatory, then its answer reached the socket at `done` (a wait inside the
        handler, as a long-poll fetch's, is passed with local_done moved back by it)."""
        st = self._apis.get(api_key) or self.stats(api_key)
        versions = st.versions
        versions[version] = versions.get(version, 0) + 1
        b, s = st.buckets, st.sums
        x = started - received
        b[bisect_left(_BOUNDS_S, x)] += 1
        s[0] += x
        x = local_done - started
        b[_NB + bisect_left(_BOUNDS_S, x)] += 1
        s[1] += x
        if remote:
            b[2 * _NB + bisect_left(_BOUNDS_S, remote)] += 1
            s[2] += remote
        else:
            b[2 * _NB] += 1
        x = done - local_done - remote
        if x > 0:
            b[3 * _NB + bisect_left(_BOUNDS_S, x)] += 1
            s[3] += x
        else:
            b[3 * _NB] += 1
        x = done - received
        b[4 * _NB + bisect_left(_BOUNDS_S, x)] += 1
        s[4] += x

    def record_error(self, api_key: int, error_code: int, n: int = 1) -> None:
        errors = (self._apis.get(api_key) or self.stats(api_key)).errors
        errors[error_code] = errors.get(error_code, 0) + n

    def snapshot(self) -> list[tuple[str, dict[int, int], dict[int, int], list[int], list[float]]]:
        """Copies, taken on the loop, that a scrape may format in another thread."""
        return [(st.name, dict(st.versions), dict(st.errors), list(st.buckets), list(st.sums))
                for st in self._apis.values()]


def cumulative_buckets(flat: list[int], which: int) -> list[tuple[str, int]]:
    """Prometheus buckets (le, cumulative count) of one of the five histograms."""
    out: list[tuple[str, int]] = []
    running = 0
    base = which * _NB
    for i, bound in enumerate(BUCKETS_MS):
        running += flat[base + i]
        out.append((repr(float(bound)), running))
    running += flat[base + _NB - 1]
    out.append(("+Inf", running))
    return out


# Per response struct: (has an error_code field, names of its struct and struct-array fields).
_PLANS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[bool, tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        fields = cls._struct._fields  # type: ignore[attr-defined]
        plan = _PLANS[cls] = (any(f.name == "error_code" for f in fields),
                              tuple(f.name for f in fields if f.is_struct() or f.is_struct_array()))
    return plan


def count_response_errors(metrics: RequestMetrics, api_key: int, response: object) -> None:
    """Every non-zero error_code in a decoded response, at any depth (Kafka's errorCounts, without NONE)."""
    errors: dict[int, int] = {}
    stack = [response]
    while stack:
        obj = stack.pop()
        has_error, children = _plan(type(obj))
        if has_error:
            code = getattr(obj, "error_code", 0)
            if code:
                errors[code] = errors.get(code, 0) + 1
        for name in children:
            value = getattr(obj, name, None)
            if isinstance(value, list):
                stack.extend(value)
            elif value is not None:
                stack.append(value)
    for code, n in errors.items():
        metrics.record_error(api_key, code, n)
