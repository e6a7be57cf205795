"""ControllerChannelManager: the controller's ordered request queues to every live broker.

Kafka keeps one RequestSendThread per broker so that LeaderAndIsr, UpdateMetadata and
StopReplica reach a broker in the order the controller decided them; a request is retried
until it is answered or the broker leaves the cluster. Here: one asyncio task per broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage

from strom.client.broker_client import BrokerClient
from strom.security.client_security import ClientSecurity

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1

ResponseCallback = Callable[[Any], None]


class _BrokerQueue:
    def __init__(self, broker_id: int, host: str, port: int, controller_id: int, timeout_ms: int,
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.client = BrokerClient(host, port, client_id=f"controller-{controller_id}", request_timeout_ms=timeout_ms,
                                   security=security)
        self.queue: asyncio.Queue[tuple[ApiMessage, int, ResponseCallback | None]] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"controller-channel-{broker_id}")

    async def _run(self) -> None:
        while True:
            request, version, callback = await self.queue.get()
            while True:
                try:
                    response = await self.client.send(request, version)
                    break
                except asyncio.CancelledError:
                    raise
                except (TimeoutError, ConnectionError, OSError) as exc:
                    log.debug("controller request %s to broker %d failed (%s); retrying",
                              type(request).__name__, self.broker_id, exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)
            if callback is not None and response is not None:
                try:
                    callback(response)
                except Exception:
                    log.exception("handling the response of broker %d to %s failed", self.broker_id,
                                  type(request).__name__)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.client.close()


class ControllerChannelManager:
    def __init__(self, controller_id: int, timeout_ms: int, security: ClientSecurity | None = None) -> None:
        self.controller_id = controller_id
        self.timeout_ms = timeout_ms
        self.security = security
        self._brokers: dict[int, _BrokerQueue] = {}

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        if broker_id not in self._brokers:
            self._brokers[broker_id] = _BrokerQueue(broker_id, host, port, self.controller_id, self.timeout_ms,
                                                    self.security)

    def remove_broker(self, broker_id: int) -> None:
        q = self._brokers.pop(broker_id, None)
        if q is not None:
            asyncio.get_running_loop().create_task(q.close())

    def send(self, broker_id: int, request: ApiMessage, version: int,
             callback: ResponseCallback | None = None) -> None:
        q = self._brokers.get(broker_id)
        if q is not None:
            q.queue.put_nowait((request, version, callback))

    async def close(self) -> None:
        queues = list(self._brokers.values())
        self._brokers.clear()
        await asyncio.gather(*(q.close() for q in queues), return_exceptions=True)
