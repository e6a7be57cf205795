"""What a handler gets besides the decoded request: who asked, and the broker's services."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.broker.session import Session
from strom.protocol.codec import RequestHeader
from strom.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from strom.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from strom.broker.admin_manager import AdminManager
    from strom.broker.apis import KafkaApis
    from strom.broker.dynamic_config import DynamicBrokerConfig
    from strom.broker.producer_id_manager import ProducerIdManager
    from strom.broker.quota.manager import QuotaManagers
    from strom.broker.replica_manager import ReplicaManager
    from strom.config import BrokerConfig
    from strom.controller.controller import KafkaController
    from strom.coordinator.group.group_coordinator import GroupCoordinator
    from strom.coordinator.transaction.transaction_coordinator import TransactionCoordinator
    from strom.metadata.publisher import MetadataPublisher
    from strom.metadata.store import MetadataStore
    from strom.metadata.zk_metadata import ZkMetadataStore
    from strom.security.authorizer import AclAuthorizer


class CloseConnection(Exception):
    """Answer nothing and close the client's connection (a failed acks=0 produce, as in Kafka)."""


@dataclass(slots=True)
class FileRegion:
    """A byte range of an open file, written to the socket with sendfile (zero copy)."""

    file: Any
    position: int
    size: int


@dataclass(slots=True)
class LazyRecords:
    """Records made while they are written (Fetch v0-v3's down-conversion, KIP-283): ``next_piece`` gives
    the next bytes, None at the end, exactly ``size`` bytes in all (the size is already on the wire)."""

    size: int
    next_piece: Callable[[], Awaitable[bytes | None]]


@dataclass(slots=True)
class RawResponse:
    """A response body a handler encoded itself: bytes, file regions and lazy records, in order."""

    parts: list[bytes | FileRegion | LazyRecords]
    # For metrics: time waited in a purgatory (long-poll fetch), and for a Fetch whether a replica sent it.
    remote_time_s: float = field(default=0.0, kw_only=True)
    from_follower: bool | None = field(default=None, kw_only=True)

    @property
    def size(self) -> int:
        return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size for p in self.parts)


@dataclass(frozen=True, slots=True)
class ClusterLink:
    """What the inter-broker APIs need in a ZooKeeper cluster."""

    store: ZkMetadataStore  # the metadata cache UpdateMetadata keeps current
    controller: KafkaController  # active on one broker; answers AlterPartition and ControlledShutdown
    publisher: MetadataPublisher  # LeaderAndIsr -> replica manager, then coordinators


@dataclass(frozen=True, slots=True)
class BrokerServices:
    """Exactly what handlers may use, built once by KafkaServer.

    Handlers see these narrow services, never the server object, so a handler can be tested with a
    context built from fakes and a multi-broker harness can inject its own metadata store.
    """

    broker_id: int
    config: BrokerConfig
    metadata: MetadataStore  # the read side of cluster metadata; writes go through admin_manager
    replica_manager: ReplicaManager
    admin_manager: AdminManager
    group_coordinator: GroupCoordinator
    producer_id_manager: ProducerIdManager
    apis: KafkaApis  # what ApiVersions advertises
    transaction_coordinator: TransactionCoordinator | None = None  # None only in handler tests built from fakes
    cluster: ClusterLink | None = None  # None on a single node (no ZooKeeper)
    dynamic_config: DynamicBrokerConfig | None = None  # AlterConfigs on broker resources
    authorizer: AclAuthorizer | None = None  # None: authorizer.class.name is empty, everything is allowed
    quotas: QuotaManagers | None = None  # client quotas; None only in handler tests built from fakes


@dataclass(slots=True)
class DeferredResponse(RawResponse):
    """An answer that is complete once ``ready`` is done: an acks=all produce waiting for the ISR.

    The connection keeps answering later requests in order behind it instead of blocking on it.
    """

    ready: asyncio.Future[bytes]


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    services: BrokerServices
    client_host: str
    session: Session
    # Set when the client went over a quota: the response carries it and the connection is muted for it.
    throttle_time_ms: int = 0

    @property
    def principal(self) -> KafkaPrincipal:
        return self.session.principal

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal, from its host, do `operation` on the resource? Always yes without an
        authorizer (one attribute test); with one, a memoised lookup."""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize(self.session.principal, self.client_host, operation,
                                                          resource_type, name)

    def authorize_cluster(self, operation: AclOperation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> set[int]:
        """The authorized_operations bitfield (as the codec's set of bit numbers) of one resource."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return {int(op) for op in SUPPORTED_OPERATIONS[resource_type]}
        return authorizer.authorized_operations(self.session.principal, self.client_host, resource_type, name)

    @property
    def listener_name(self) -> str:
        return self.session.endpoint.listener_name

    @property
    def security_protocol(self) -> str:
        return self.session.endpoint.security_protocol

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def broker_id(self) -> int:
        return self.services.broker_id

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def metadata(self) -> MetadataStore:
        return self.services.metadata

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.services.replica_manager

    @property
    def admin_manager(self) -> AdminManager:
        return self.services.admin_manager

    @property
    def group_coordinator(self) -> GroupCoordinator:
        return self.services.group_coordinator

    @property
    def producer_id_manager(self) -> ProducerIdManager:
        return self.services.producer_id_manager
