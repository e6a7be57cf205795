"""MetricsEndpoint: a small HTTP/1.1 server on the broker's loop for /metrics, /healthz and /readyz.

One request per connection (answered with `Connection: close`), GET and HEAD only, headers capped
at 8 KiB and 10 s, at most MAX_CLIENTS connections at once, so a stuck or hostile client holds a
socket and nothing else. /metrics takes
its snapshot on the loop (plain copies, cheap) and formats the text in a worker thread, so a large
scrape does not hold up requests on the Kafka port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from strom.config import ConfigError
from strom.metrics.collector import BrokerCollector, render

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 8192
HEADER_TIMEOUT_S = 10.0
MAX_CLIENTS = 64  # connections served at once; more are closed at once (scrapers retry)
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}
INDEX = (b"Strom broker metrics\n  /metrics  Prometheus metrics\n  /healthz  200 while the process runs\n"
         b"  /readyz   200 once listeners are open and log recovery is done, else 503\n")


class MetricsEndpoint:
    def __init__(self, host: str, port: int, collector: BrokerCollector, is_ready: Callable[[], bool]) -> None:
        self.host = host
        self.port = port  # the bound port once started (port 0 picks one)
        self._collector = collector
        self._is_ready = is_ready
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self.host or None, self.port,
                                                      reuse_address=True, limit=MAX_HEADER_BYTES)
        except OSError as exc:
            raise ConfigError(f"cannot listen on metrics.listener {self.url}: {exc.strerror or exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics endpoint on %s (/metrics, /healthz, /readyz)", self.url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._clients):
                task.cancel()
            await asyncio.gather(*self._clients, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._clients) >= MAX_CLIENTS:
            writer.close()
            return
        if task is not None:
            self._clients.add(task)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            status, body, content_type, head_only = await self._answer(head)
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % (status, _REASONS[status].encode(), content_type.encode(), len(body)))
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("metrics endpoint: request failed")
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()

    async def _answer(self, head: bytes) -> tuple[int, bytes, str, bool]:
        text = "text/plain; charset=utf-8"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return 400, b"bad request\n", text, False
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return 405, b"only GET and HEAD\n", text, False
        head_only = method == b"HEAD"
        if target == b"/healthz":
            return 200, b"ok\n", text, head_only
        if target == b"/readyz":
            if self._is_ready():
                return 200, b"ready\n", text, head_only
            return 503, b"not ready: starting or recovering logs\n", text, head_only
        if target == b"/metrics":
            try:
                snapshot = self._collector.snapshot()
                body = await asyncio.get_running_loop().run_in_executor(None, render, snapshot)
            except Exception:
                log.exception("metrics endpoint: rendering metrics failed")
                return 500, b"rendering metrics failed; see the broker log\n", text, head_only
            return 200, body, CONTENT_TYPE_PLAIN_0_0_4, head_only
        if target == b"/":
            return 200, INDEX, text, head_only
        return 404, b"not found: try /metrics, /healthz or /readyz\n", text, head_only
