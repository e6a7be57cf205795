"""ACL types as Kafka names them: resource patterns, access control entries, bindings and filters.

The wire codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`); the
names in ZooKeeper JSON are Kafka's camel case ("Read", "DescribeConfigs", "Allow"), and the ones
`kafka-acls.sh` prints are the upper-case enum names ("READ", "DESCRIBE_CONFIGS", "ALLOW").
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Self

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(enum.IntEnum):
    @property
    def camel(self) -> str:
        """Kafka's ZooKeeper spelling: TRANSACTIONAL_ID -> TransactionalId."""
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> Self:
        """By upper-case name, camel-case name or any case, with or without underscores ("describe-configs" too)."""
        key = text.strip().replace("-", "_").replace(" ", "_").upper()
        for member in cls:
            if key in (member.name, member.name.replace("_", "")):
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}; expected one of "
                         f"{', '.join(m.camel for m in cls if m.name not in ('UNKNOWN',))}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Resource types ACLs may name here, and the operations each supports (Kafka's ResourceType.supportedOperations);
# the authorized_operations bitfields of Metadata, DescribeGroups and DescribeCluster are drawn from these.
SUPPORTED_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                            ResourceType.TRANSACTIONAL_ID)
Op = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}
# An ALLOW of any of these also allows the key (Kafka's implied operations); a DENY implies nothing.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
}
del Op


class InvalidAclError(ValueError):
    """An ACL or filter that cannot be stored or matched (the APIs answer INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")

    def validate(self) -> None:
        """What Kafka refuses to store: unknown or filter-only types, an empty name, a cluster not named kafka-cluster."""
        if self.resource_type not in SUPPORTED_RESOURCE_TYPES:
            raise InvalidAclError(f"Invalid resource type {self.resource_type.name} for an ACL")
        if not self.pattern_type.is_specific:
            raise InvalidAclError(f"Invalid pattern type {self.pattern_type.name}: ACLs are LITERAL or PREFIXED")
        if not self.name:
            raise InvalidAclError("Invalid empty resource name")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" or "User:*"
    host: str  # "*" or an IP address
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")

    def validate(self) -> None:
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"Invalid operation {self.operation.name} for an ACL")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permission type {self.permission_type.name} for an ACL")
        principal_type, sep, name = self.principal.partition(":")
        if not sep or not principal_type or not name:
            raise InvalidAclError(f"Invalid principal {self.principal!r}: expected Type:name, e.g. User:alice")
        if not self.host:
            raise InvalidAclError("Invalid empty host: use * for any host")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()
        if self.entry.operation not in (*SUPPORTED_OPERATIONS[self.pattern.resource_type], AclOperation.ALL):
            raise InvalidAclError(f"Operation {self.entry.operation.name} does not apply to a "
                                  f"{self.pattern.resource_type.name} resource")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls and DeleteAcls select ACLs with this: None and ANY match everything; pattern type MATCH
    selects the patterns that would apply to the named resource (literal, wildcard and prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        for field, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                             ("operation", self.operation), ("permission type", self.permission_type)):
            if value.name == "UNKNOWN":
                raise InvalidAclError(f"Invalid {field} in the ACL filter")

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: every pattern that applies to the resource of this name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


# -- from the wire codes of DescribeAcls, CreateAcls and DeleteAcls ------------------------------------------
def _enum(cls: type, code: int, what: str):  # noqa: ANN202 - one of the ACL enums
    """The enum member of a wire code; an unknown code is an invalid ACL (INVALID_REQUEST)."""
    try:
        return cls(code)
    except ValueError:
        raise InvalidAclError(f"Unknown {what} code {code}") from None


def binding_from_codes(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
            permission_type: int) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, resource_type, "resource type"), name or "",
                        _enum(PatternType, pattern_type, "pattern type")),
        AccessControlEntry(principal or "", host or "", _enum(AclOperation, operation, "operation"),
                           _enum(AclPermissionType, permission_type, "permission type")))


def filter_from_codes(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                   host: str | None, operation: int, permission_type: int) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, resource_type, "resource type"), name,
                            _enum(PatternType, pattern_type, "pattern type"), principal, host,
                            _enum(AclOperation, operation, "operation"),
                            _enum(AclPermissionType, permission_type, "permission type"))


# -- ZooKeeper JSON (Kafka's AclEntry.toJsonCompatibleMap) ---------------------------------------------------
def encode_acls(entries: set[AccessControlEntry] | frozenset[AccessControlEntry]) -> bytes:
    """``{"version":1,"acls":[{"principal":..,"permissionType":"Allow","operation":"Read","host":"*"}]}``."""
    acls = [{"principal": e.principal, "permissionType": e.permission_type.camel, "operation": e.operation.camel,
             "host": e.host} for e in sorted(entries, key=_entry_key)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    doc = json.loads(data)
    return frozenset(
        AccessControlEntry(a["principal"], a["host"], AclOperation.parse(a["operation"]),
                           AclPermissionType.parse(a["permissionType"]))
        for a in doc.get("acls", []))


def _entry_key(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return e.principal, e.host, int(e.operation), int(e.permission_type)


def binding_sort_key(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (int(b.pattern.resource_type), b.pattern.name, int(b.pattern.pattern_type), *_entry_key(b.entry))
