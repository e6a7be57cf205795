"""RequestMetrics: per-API request counts, error counts and latency histograms (Kafka's RequestMetrics).

A request's time splits as in Kafka: queue (received -> handler starts), local (handler, minus
purgatory waits), remote (waiting in a purgatory: acks=all produce, long-poll fetch), response
send (answer ready -> handed to the socket) and total.

Recording is on the hot path (25-30 µs per small request), where five histogram updates in
Python would cost several percent. So `record` only appends the request's timestamps to a
per-API buffer, and `_fold` turns a buffer into counts in bulk with C-level primitives (zip,
map, sort, bisect, fsum) every FOLD_EVERY requests and before each scrape. Everything runs
on the broker's loop: no locks. A bucket holds observations up to and including its bound.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from operator import sub
from typing import Any

import kafka.errors as Errors

from strom.protocol.api_keys import ApiKey

# Histogram bucket upper bounds, in ms (as Kafka's *TimeMs): 50 µs .. 30 s.
BUCKETS_MS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500,
                                 5000, 10000, 30000)
_BOUNDS_S: tuple[float, ...] = tuple(b / 1000 for b in BUCKETS_MS)
_NB = len(_BOUNDS_S) + 1  # + the +Inf bucket
# The five time histograms of a request, in the order their counts sit in ApiStats.buckets.
TIMES = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems", "totaltimems")
QUEUE, LOCAL, REMOTE, SEND, TOTAL = range(5)
FOLD_EVERY = 4096  # buffered requests of one API before they are folded into its histograms


# Kafka's current names where kafka-python still has an older one.
_ERROR_NAMES = {-1: "UNKNOWN_SERVER_ERROR", 6: "NOT_LEADER_OR_FOLLOWER", 10: "MESSAGE_TOO_LARGE"}


def error_name(code: int) -> str:
    """Kafka's name of an error code (Errors enum), as the `error` label of ErrorsPerSec."""
    name = _ERROR_NAMES.get(code)
    if name is None:
        cls = Errors.for_code(code)
        name = cls.message if getattr(cls, "errno", None) == code else str(code)
    return name


# Kafka times a Fetch twice: as Fetch and as FetchConsumer or FetchFollower. Keys for the second names:
FETCH_CONSUMER, FETCH_FOLLOWER = -2, -3
_PSEUDO_APIS = {FETCH_CONSUMER: "FetchConsumer", FETCH_FOLLOWER: "FetchFollower"}


def api_name(api_key: int) -> str:
    """Kafka's name of an API (ApiKeys.name): LIST_OFFSETS -> ListOffsets."""
    if api_key in _PSEUDO_APIS:
        return _PSEUDO_APIS[api_key]
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


class ApiStats:
    """One API's counters: requests per version, errors per code, five histograms (flat bucket counts)."""

    __slots__ = ("name", "versions", "errors", "buckets", "sums")

    def __init__(self, name: str) -> None:
        self.name = name
        self.versions: Counter[int] = Counter()
        self.errors: dict[int, int] = {}
        self.buckets = [0] * (_NB * len(TIMES))
        self.sums = [0.0] * len(TIMES)  # seconds


def _histogram_add(buckets: list[int], base: int, values: Iterable[float]) -> None:
    """Add observations (seconds) to one histogram's non-cumulative bucket counts: sort (list.sort compares
    floats natively), then cut at the bounds with one bisection per bound."""
    ordered = sorted(values)
    below = 0
    for i, bound in enumerate(_BOUNDS_S):
        upto = bisect_right(ordered, bound, below)
        buckets[base + i] += upto - below
        below = upto
    buckets[base + _NB - 1] += len(ordered) - below


class RequestMetrics:
    """Every API's ApiStats, and the not-yet-folded timestamps of answered requests.

    Two buffers per API: answers handed over at once with no purgatory wait (most requests, the
    gathered Produce answers among them) keep four timestamps; the others keep six.
    """

    def __init__(self) -> None:
        self._apis: dict[int, ApiStats] = {}
        # api key -> [(version, received, started, done), ...]: no remote time, no separate send
        self._quick: dict[int, list[tuple[int, float, float, float]]] = {}
        # api key -> [(version, received, started, local_done, remote, done), ...]
        self._pending: dict[int, list[tuple[int, float, float, float, float, float]]] = {}

    def stats(self, api_key: int) -> ApiStats:
        st = self._apis.get(api_key)
        if st is None:
            st = self._apis[api_key] = ApiStats(api_name(api_key))
        return st

    def record_quick(self, api_key: int, version: int, received: float, started: float, done: float) -> None:
        """A request whose answer was ready at `done` and handed over then, with no purgatory wait."""
        quick = self._quick.get(api_key)
        if quick is None:
            quick = self._quick[api_key] = []
        quick.append((version, received, started, done))
        if len(quick) >= FOLD_EVERY:
            self._fold(api_key)

    def record(self, api_key: int, version: int, received: float, started: float, local_done: float,
               remote: float, done: float) -> None:
        """One request answered (monotonic seconds): local work ran from `started` to `local_done`, then it
        waited `remote` in a purgatory, then its answer reached the socket at `done` (a wait inside the
        handler, as a long-poll fetch's, is passed with local_done moved back by it)."""
        pending = self._pending.get(api_key)
        if pending is None:
            pending = self._pending[api_key] = []
        pending.append((version, received, started, local_done, remote, done))
        if len(pending) >= FOLD_EVERY:
            self._fold(api_key)

    def record_raw(self, api_key: int, version: int, received: float, started: float, local_done: float,
                   response: Any, done: float) -> None:
        """An answer the handler encoded itself (a Fetch), written at `done`; a long poll's purgatory wait
        happened inside the handler, so local time ends that much before `local_done`."""
        remote = response.remote_time_s
        self.record(api_key, version, received, started, local_done - remote, remote, done)
        if response.from_follower is not None:
            self.record(FETCH_FOLLOWER if response.from_follower else FETCH_CONSUMER, version, received, started,
                        local_done - remote, remote, done)

    def _fold(self, api_key: int) -> None:
        """One API's buffered requests into its counters. Sums come from column sums (the sum of b - a is
        sum(b) - sum(a)), histograms from sorted differences: no per-request Python code."""
        st = self.stats(api_key)
        b, sums = st.buckets, st.sums
        quick = self._quick.pop(api_key, None)
        if quick:
            versions, received, started, done = zip(*quick, strict=True)
            st.versions.update(versions)
            s_received, s_started, s_done = math.fsum(received), math.fsum(started), math.fsum(done)
            sums[QUEUE] += s_started - s_received
            sums[LOCAL] += s_done - s_started
            sums[TOTAL] += s_done - s_received
            b[REMOTE * _NB] += len(quick)
            b[SEND * _NB] += len(quick)
            _histogram_add(b, QUEUE * _NB, map(sub, started, received))
            _histogram_add(b, LOCAL * _NB, map(sub, done, started))
            _histogram_add(b, TOTAL * _NB, map(sub, done, received))
        pending = self._pending.pop(api_key, None)
        if pending:
            versions, received, started, local_done, remote, done = zip(*pending, strict=True)
            st.versions.update(versions)
            send = list(map(sub, map(sub, done, local_done), remote))
            sums[QUEUE] += math.fsum(started) - math.fsum(received)
            sums[LOCAL] += math.fsum(local_done) - math.fsum(started)
            sums[REMOTE] += math.fsum(remote)
            sums[SEND] += math.fsum(send)
            sums[TOTAL] += math.fsum(done) - math.fsum(received)
            _histogram_add(b, QUEUE * _NB, map(sub, started, received))
            _histogram_add(b, LOCAL * _NB, map(sub, local_done, started))
            _histogram_add(b, REMOTE * _NB, remote)
            _histogram_add(b, SEND * _NB, send)
            _histogram_add(b, TOTAL * _NB, map(sub, done, received))

    def fold_all(self) -> None:
        for api_key in {*self._quick, *self._pending}:
            self._fold(api_key)

    def record_error(self, api_key: int, error_code: int, n: int = 1) -> None:
        errors = (self._apis.get(api_key) or self.stats(api_key)).errors
        errors[error_code] = errors.get(error_code, 0) + n

    def snapshot(self) -> list[tuple[str, dict[int, int], dict[int, int], list[int], list[float]]]:
        """Copies, taken on the loop, that a scrape may format in another thread."""
        self.fold_all()
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
        struct = getattr(cls, "_struct", None)
        fields = getattr(struct, "_fields", None) or ()  # not a message struct: nothing to count in it
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
            if code and isinstance(code, int):
                errors[code] = errors.get(code, 0) + 1
        for name in children:
            value = getattr(obj, name, None)
            if isinstance(value, list):
                stack.extend(value)
            elif value is not None:
                stack.append(value)
    for code, n in errors.items():
        metrics.record_error(api_key, code, n)
