"""KafkaApis: routes a decoded request to its handler module (one module per API).

Handlers are thin: they translate between the wire and a domain service
(ReplicaManager, AdminManager, coordinators) and own no state.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import TYPE_CHECKING, Any

from strom.broker.error_response import encode_error_response
from strom.broker.quota.throttle import (
    REQUEST_QUOTA_EXEMPT,
    HandlerTimer,
    is_replica_fetch,
    with_throttle_time,
)
from strom.broker.request import CloseConnection, RawResponse, RequestContext
from strom.metrics.request_metrics import RequestMetrics, count_response_errors
from strom.protocol import codec
from strom.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey

if TYPE_CHECKING:
    from strom.broker.quota.manager import QuotaManagers

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Coroutine[Any, Any, Any]]
UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_VERSION = 35
# Test hook: API keys (numbers, comma separated) whose handlers always raise, to exercise the
# unexpected-error path end to end. Unset in production.
FAIL_API_ENV = "STROM_TEST_FAIL_API"


class InjectedFailure(RuntimeError):
    """Raised in place of a handler named by STROM_TEST_FAIL_API (tests only)."""


def _injected_failure_apis() -> frozenset[int]:
    return frozenset(int(k) for k in os.environ.get(FAIL_API_ENV, "").split(",") if k.strip())


class KafkaApis:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self.supported_versions: dict[int, tuple[int, int]] = dict(SUPPORTED_VERSIONS)
        self._fail_apis = _injected_failure_apis()
        self.quotas: QuotaManagers | None = None  # set by the server; the request-time quota is enforced here
        self.request_metrics: RequestMetrics | None = None  # error counts per API, when metrics are on
        # APIs whose handlers answer at once (or with a DeferredResponse): a connection may gather their
        # answers into one write instead of writing each (a handler module says so with GATHER_RESPONSES).
        self.gathered_apis: set[int] = set()

    def register(self, api_key: int, handler: Handler, versions: tuple[int, int] | None = None) -> None:
        self._handlers[api_key] = handler
        if versions is not None:
            self.supported_versions[api_key] = versions

    def register_module(self, module: ModuleType) -> None:
        """A handler module declares API_KEY, optional VERSIONS and GATHER_RESPONSES, and
        `async def handle(ctx, request)`."""
        self.register(module.API_KEY, module.handle, getattr(module, "VERSIONS", None))
        if getattr(module, "GATHER_RESPONSES", False):
            self.gathered_apis.add(module.API_KEY)

    def advertised(self) -> dict[int, tuple[int, int]]:
        return {k: v for k, v in self.supported_versions.items() if k in self._handlers}

    async def handle(self, ctx: RequestContext, body: memoryview) -> bytes | RawResponse | None:
        header = ctx.header
        if header.api_key == ApiKey.API_VERSIONS and header.api_version > self.supported_versions[ApiKey.API_VERSIONS][1]:
            # The client may be newer than us: answer v0 so it can downgrade.
            from strom.broker.handlers import api_versions

            return api_versions.unsupported_version_response(ctx, self)
        handler = self._handlers.get(header.api_key)
        versions = self.supported_versions.get(header.api_key)
        if handler is None or versions is None:
            raise codec.MalformedRequest(f"unsupported API key {header.api_key}")
        if not versions[0] <= header.api_version <= versions[1]:
            return self._unsupported_version(header, body, versions)
        quotas = self.quotas
        # A client with a request_percentage quota: its loop time is counted from the start of decoding.
        started = (time.perf_counter_ns() if quotas is not None and quotas.request.enabled
                   and header.api_key not in REQUEST_QUOTA_EXEMPT else 0)
        request = codec.decode_request(header, body)
        try:
            if header.api_key in self._fail_apis:
                raise InjectedFailure(f"{FAIL_API_ENV} fails API {header.api_key}")
            if started:
                response = await self._timed(ctx, handler, request, started)
            else:
                response = await handler(ctx, request)
            if ctx.throttle_time_ms:
                response = with_throttle_time(ctx, response)
            if response is None or isinstance(response, RawResponse | bytes):
                return response
            if self.request_metrics is not None:
                count_response_errors(self.request_metrics, header.api_key, response)
            return codec.encode_response(header, response)  # inside: a response that cannot encode is a bug too
        except (codec.MalformedRequest, CloseConnection):
            raise
        except Exception:
            # As Kafka does: this request gets UNKNOWN_SERVER_ERROR, the connection stays open.
            log.exception("unexpected error handling %s v%d (correlation id %d) from %s",
                          ApiKey(header.api_key).name, header.api_version, header.correlation_id, ctx.client_host)
            if self.request_metrics is not None:
                self.request_metrics.record_error(header.api_key, UNKNOWN_SERVER_ERROR)
            if header.api_key == ApiKey.PRODUCE and request.acks == 0:
                # No response to carry the error: closing is how an acks=0 producer learns of it.
                raise CloseConnection("acks=0 produce failed") from None
            return encode_error_response(header, request, UNKNOWN_SERVER_ERROR)

    def _unsupported_version(self, header: codec.RequestHeader, body: memoryview, versions: tuple[int, int]) -> bytes:
        """A version outside the advertised range gets UNSUPPORTED_VERSION in that version's response when the
        request can be read (a client sees a clear error instead of a closed connection); otherwise, or for an
        acks=0 produce (no answer can carry it), the connection is closed."""
        reason = (f"unsupported version {header.api_version} of API {ApiKey(header.api_key).name} "
                  f"(supported {versions[0]}-{versions[1]})")
        request = codec.decode_request(header, body)  # MalformedRequest (close) for a version nobody defines
        if header.api_key == ApiKey.PRODUCE and request.acks == 0:
            raise codec.MalformedRequest(reason)
        log.debug("answering UNSUPPORTED_VERSION: %s", reason)
        if self.request_metrics is not None:
            self.request_metrics.record_error(header.api_key, UNSUPPORTED_VERSION)
        return encode_error_response(header, request, UNSUPPORTED_VERSION)

    async def _timed(self, ctx: RequestContext, handler: Handler, request: Any, started_ns: int) -> Any:
        """Run the handler counting only the loop time its steps take (not its waits), and throttle the
        client when that takes it over its request_percentage quota (Kafka's request quota)."""
        timer = HandlerTimer(handler(ctx, request))
        timer.nanos = time.perf_counter_ns() - started_ns  # decoding
        try:
            return await timer
        finally:
            assert self.quotas is not None
            header = ctx.header
            if not (header.api_key == ApiKey.FETCH and is_replica_fetch(header.api_version, request)):
                throttle = self.quotas.record_request_time(ctx, timer.nanos)
                if throttle > ctx.throttle_time_ms:
                    ctx.throttle_time_ms = throttle
