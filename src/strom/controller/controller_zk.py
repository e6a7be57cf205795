"""`ControllerZk`: the part of ZooKeeper the controller's state machines read and write.

`KafkaController` decides leaders and ISRs from what it reads here and records every decision
with the fenced writes below; nothing else about ZooKeeper matters to it. Naming exactly these
methods lets the controller run against `KafkaZkClient` in a broker and against an in-memory
ZooKeeper in unit tests (which must honour the same contracts: conditional sets on znode
versions, writes fenced by `/controller_epoch`'s version, ephemerals that vanish with their
session, watches that fire, a session id that changes when the session expires).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from strom.metadata.zk.kafka_zk_client import StateListener
from strom.metadata.zk.zk_data import BrokerRegistration, LeaderIsrAndControllerEpoch, TopicAssignment


class ControllerZk(Protocol):
    """The `KafkaZkClient` methods `KafkaController` uses, with the same contracts (see there)."""

    @property
    def session_id(self) -> int | None:
        """The current session's id; it changes when the session expires."""
        ...

    def add_state_listener(self, listener: StateListener) -> None: ...

    def watch_children(self, path: str, callback: Callable[[list[str]], bool | None]) -> Any: ...

    def watch_data(self, path: str, callback: Callable[[bytes | None, Any], bool | None]) -> Any: ...

    # -- election -------------------------------------------------------------------------------------
    def register_controller_and_increment_controller_epoch(self, broker_id: int) -> tuple[int, int]: ...

    # -- reads --------------------------------------------------------------------------------------
    def get_all_brokers(self) -> dict[int, BrokerRegistration]: ...

    def get_all_topics(self) -> list[str]: ...

    def get_topic_assignment(self, name: str) -> TopicAssignment | None: ...

    def get_partition_state(self, topic: str, partition: int) -> tuple[LeaderIsrAndControllerEpoch, int] | None: ...

    def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrAndControllerEpoch, int]]: ...

    def get_topic_deletions(self) -> list[str]: ...

    # -- fenced writes ------------------------------------------------------------------------------
    def create_partition_states(self, topic: str, states: dict[int, LeaderIsrAndControllerEpoch],
                                expected_controller_epoch_zk_version: int) -> dict[int, int]: ...

    def update_partition_state(self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch,
                               expected_zk_version: int, controller_epoch_zk_version: int) -> int: ...

    def update_partition_states(self, updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
                                controller_epoch_zk_version: int) -> dict[tuple[str, int], int]: ...

    def delete_topic_znodes(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None: ...

    def remove_topic_deletion(self, name: str, expected_controller_epoch_zk_version: int | None = None) -> None: ...

    # -- partition reassignment (KIP-455) --
    def update_assignments_and_states(self, assignments: list[TopicAssignment], names: list[str],
                                      updates: list[tuple[str, int, LeaderIsrAndControllerEpoch, int]],
                                      controller_epoch_zk_version: int) -> dict[tuple[str, int], int]: ...

    def get_partition_reassignment(self) -> dict[tuple[str, int], list[int]] | None: ...

    def set_or_delete_partition_reassignment(self, remaining: dict[tuple[str, int], list[int]],
                                             controller_epoch_zk_version: int) -> None: ...

    # -- dynamic configs (the balancer's replication throttles) --
    def get_broker_configs(self, broker_id: int | None) -> dict[str, str]: ...

    def set_broker_configs(self, broker_id: int | None, configs: dict[str, str]) -> None: ...

    def get_topic_configs(self, name: str) -> dict[str, str]: ...

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    def get_balancer_throttles(self) -> tuple[set[int], set[str]]: ...

    def set_balancer_throttles(self, brokers: set[int], topics: set[str]) -> None: ...

    # -- log dir failures (KIP-112) --
    def get_log_dir_events(self) -> dict[str, int | None]: ...

    def delete_log_dir_events(self, children: list[str], expected_controller_epoch_zk_version: int) -> None: ...


__all__ = ["ControllerZk"]
