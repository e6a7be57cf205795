"""DynamicBrokerConfig: broker configs changed at run time, as Kafka's dynamic broker configs.

AlterConfigs / IncrementalAlterConfigs on a broker resource (its id, or "" for the cluster
default) land here: the new layer is validated against the broker's config, written to the
metadata store (``/config/brokers/<id>`` or ``/config/brokers/<default>`` in ZooKeeper, the
embedded store's file on a single node) and applied to the live BrokerConfig. Every broker
re-reads both of its layers when ZooKeeper's ``/config/changes`` grows, so a cluster-default
change reaches all brokers; at start-up the persisted layers are read before logs load.

Components that cache a config value register a reconfigure callback, told which keys'
effective values changed (Kafka's ``Reconfigurable``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import kafka.errors as Errors

from strom.config import BrokerConfig, ConfigError, DynamicUpdateError
from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)

Reconfigure = Callable[[set[str]], None]


class DynamicBrokerConfig:
    def __init__(self, config: BrokerConfig, store: MetadataStore, broker_id: int) -> None:
        self.config = config
        self.store = store
        self.broker_id = broker_id
        self._reconfigurables: list[Reconfigure] = []
        # Writes and re-reads are serialised, so a re-read begun before a write cannot undo it.
        self._lock = asyncio.Lock()

    def add_reconfigurable(self, callback: Reconfigure) -> None:
        self._reconfigurables.append(callback)

    def resource_broker(self, resource_name: str) -> int | None:
        """Broker resource name -> this broker's id, or None for the cluster default ("")."""
        if resource_name == "":
            return None
        if resource_name != str(self.broker_id):
            raise Errors.InvalidRequestError(
                f"Unexpected broker id, expected {self.broker_id} or empty string, but received {resource_name}")
        return self.broker_id

    def current(self, broker_id: int | None) -> dict[str, str]:
        """The dynamic layer of this broker (or of the cluster default) as last applied."""
        return self.config.dynamic_configs(per_broker=broker_id is not None)

    def load(self) -> None:
        """Read the persisted layers (blocking; start-up, before anything reads topic defaults)."""
        mine, default = self._read()
        self._apply(mine, default)

    async def alter(self, broker_id: int | None, configs: dict[str, str], validate_only: bool) -> None:
        """Replace one layer with ``configs`` (validated), persist it, apply it here at once."""
        try:
            clean = self.config.validate_dynamic_update(configs, per_broker=broker_id is not None)
        except DynamicUpdateError as exc:
            raise Errors.InvalidRequestError(str(exc)) from exc
        except ConfigError as exc:
            raise Errors.InvalidConfigurationError(str(exc)) from exc
        if validate_only:
            return
        loop = asyncio.get_running_loop()
        async with self._lock:
            # ZooKeeper (or an fsync) must not stall the event loop.
            await loop.run_in_executor(None, self.store.set_broker_configs, broker_id, clean)
            if broker_id is None:
                self._apply(None, clean)
            else:
                self._apply(clean, None)

    async def reload(self) -> None:
        """Re-read both layers (a change notification arrived) and apply what differs."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            try:
                mine, default = await loop.run_in_executor(None, self._read)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the next notification retries
                log.warning("could not read dynamic broker configs: %s", exc)
                return
            self._apply(mine, default)

    def _read(self) -> tuple[dict[str, str], dict[str, str]]:
        return self.store.broker_configs(self.broker_id), self.store.broker_configs(None)

    def _apply(self, mine: dict[str, str] | None, default: dict[str, str] | None) -> None:
        changed, problems = self.config.set_dynamic_configs(mine, default)
        for problem in problems:
            log.warning("%s", problem)
        if not changed:
            return
        log.info("dynamic broker configs changed: %s", ", ".join(sorted(changed)))
        for callback in self._reconfigurables:
            try:
                callback(changed)
            except Exception:
                log.exception("applying dynamic broker configs %s failed", sorted(changed))
