"""What the ACL APIs share: turning wire codes into ACL types, and the answer without an authorizer."""

from __future__ import annotations

from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(cls: type, code: int, what: str):  # noqa: ANN202 - one of the ACL enums
    try:
        return cls(code)
    except ValueError:
        raise InvalidAclError(f"Unknown {what} code {code}") from None


def binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
            permission_type: int) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, resource_type, "resource type"), name or "",
                        _enum(PatternType, pattern_type, "pattern type")),
        AccessControlEntry(principal or "", host or "", _enum(AclOperation, operation, "operation"),
                           _enum(AclPermissionType, permission_type, "permission type")))


def binding_filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                   host: str | None, operation: int, permission_type: int) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, resource_type, "resource type"), name,
                            _enum(PatternType, pattern_type, "pattern type"), principal, host,
                            _enum(AclOperation, operation, "operation"),
                            _enum(AclPermissionType, permission_type, "permission type"))
