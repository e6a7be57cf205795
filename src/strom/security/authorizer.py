"""AclAuthorizer: Kafka's ACL rules over an in-memory cache of the ACLs the metadata store holds.

A request is allowed when its principal is a super user, or when no DENY entry of a pattern that
applies to the resource matches it and some ALLOW entry does (an ALLOW of Read, Write, Delete or
Alter also allows Describe; of AlterConfigs, DescribeConfigs; All covers everything). A resource
that no ACL names at all follows ``allow.everyone.if.no.acl.found``. Patterns that apply to a
resource are its LITERAL name, the LITERAL wildcard ``*`` and every PREFIXED prefix of its name.

The cache is the store's ACLs; the store calls ``apply`` when any broker changed a resource's ACLs,
so changes take effect without a restart. Decisions are memoised per (principal, host, operation,
resource) until the next change: a produce or fetch repeats the same few questions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.security.acl import (
    CLUSTER_NAME,
    IMPLIED_BY,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_sort_key,
)
from strom.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.metadata.store import MetadataStore

log = logging.getLogger(__name__)

# authorizer.class.name values that turn ACLs on (ZooKeeper-mode and KRaft-mode class names of Kafka).
AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
# The ACL APIs' error message when authorizer.class.name is empty (SECURITY_DISABLED).
NO_AUTHORIZER = "No Authorizer is configured on the broker"
# Memoised decisions kept at most; the whole memo is dropped when full (and on every ACL change).
DECISION_CACHE_SIZE = 100_000

ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
ALL = AclOperation.ALL
Entries = frozenset[AccessControlEntry]


class AuthorizerConfigError(ValueError):
    """authorizer.class.name names a class Strom does not provide."""


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's super.users: principals separated by ';' ("User:admin;User:broker")."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class AclAuthorizer:
    def __init__(self, store: MetadataStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, Entries] = {}
        self._literal: dict[tuple[ResourceType, str], Entries] = {}
        self._prefixed: dict[ResourceType, dict[str, Entries]] = {}
        self._decisions: dict[tuple[KafkaPrincipal, str, AclOperation, ResourceType, str], bool] = {}

    # -- the cache ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Blocking (call off the loop in a cluster): subscribe to changes first, then read every ACL, so a
        change made in between is in the read or in a notification."""
        self.store.watch_acls(self.apply)
        self.load(self.store.load_acls())

    @property
    def pattern_count(self) -> int:
        return len(self._acls)

    def load(self, acls: dict[ResourcePattern, Entries]) -> None:
        self._acls = {p: frozenset(e) for p, e in acls.items() if e}
        self._reindex()

    def apply(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """A resource's ACLs as they are now (empty: none left)."""
        entries = frozenset(entries)
        if self._acls.get(pattern, frozenset()) == entries:
            return
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
        log.info("ACLs of %s now %s", pattern, ", ".join(str(e) for e in entries) or "none")
        self._reindex()

    def _reindex(self) -> None:
        literal: dict[tuple[ResourceType, str], Entries] = {}
        prefixed: dict[ResourceType, dict[str, Entries]] = {}
        for p, entries in self._acls.items():
            if p.pattern_type == PatternType.LITERAL:
                literal[(p.resource_type, p.name)] = entries
            else:
                prefixed.setdefault(p.resource_type, {})[p.name] = entries
        self._literal, self._prefixed = literal, prefixed
        self._decisions = {}

    # -- decisions ----------------------------------------------------------------------------------
    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= DECISION_CACHE_SIZE:
                self._decisions = {}
            self._decisions[key] = decision
        return decision

    def _matching(self, resource_type: ResourceType, name: str) -> list[Entries]:
        found = []
        literal = self._literal
        if (e := literal.get((resource_type, name))) is not None:
            found.append(e)
        if name != WILDCARD_RESOURCE and (e := literal.get((resource_type, WILDCARD_RESOURCE))) is not None:
            found.append(e)
        for prefix, e in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                found.append(e)
        return found

    def _decide(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        matching = self._matching(resource_type, name)
        if not matching:
            return self.allow_everyone_if_no_acl_found
        allowed_ops = IMPLIED_BY.get(operation, frozenset((operation,)))
        allowed = False
        for entries in matching:
            for e in entries:
                if e.principal != who and e.principal != WILDCARD_PRINCIPAL:
                    continue
                if e.host != host and e.host != WILDCARD_HOST:
                    continue
                if e.permission_type == DENY:
                    if e.operation == operation or e.operation == ALL:
                        return False  # DENY wins, whatever else allows
                elif e.operation == ALL or e.operation in allowed_ops:
                    allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on at least one resource of the type (KIP-679: an
        idempotent producer needs Write on some topic); a DENY of the same or a wider pattern cancels an ALLOW."""
        who = str(principal)
        if who in self.super_users:
            return True
        patterns = [(p, e) for p, e in self._acls.items() if p.resource_type == resource_type]
        if not patterns:
            return self.allow_everyone_if_no_acl_found
        allowed_ops = IMPLIED_BY.get(operation, frozenset((operation,)))

        def applies(e: AccessControlEntry) -> bool:
            return e.principal in (who, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD_HOST)

        denies = [p for p, entries in patterns
                  if any(applies(e) and e.permission_type == DENY and e.operation in (operation, ALL) for e in entries)]
        if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD_RESOURCE for p in denies):
            return False
        for p, entries in patterns:
            if not any(applies(e) and e.permission_type == ALLOW and (e.operation == ALL or e.operation in allowed_ops)
                       for e in entries):
                continue
            covered = any(d.name == p.name and d.pattern_type == p.pattern_type
                          or d.pattern_type == PatternType.PREFIXED and p.name.startswith(d.name)
                          for d in denies)
            if not covered:
                return True
        return False

    def authorized_operations(self, principal: KafkaPrincipal, host: str, resource_type: ResourceType,
                              name: str) -> set[int]:
        """The operation codes the principal may perform on the resource (authorized_operations bitfields)."""
        return {int(op) for op in SUPPORTED_OPERATIONS[resource_type]
                if self.authorize(principal, host, op, resource_type, name)}

    # -- administration (DescribeAcls, CreateAcls, DeleteAcls) -------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return sorted((AclBinding(p, e) for p, entries in self._acls.items() if acl_filter.matches_pattern(p)
                       for e in entries if acl_filter.matches_entry(e)), key=binding_sort_key)

    async def create_acls(self, bindings: list[AclBinding]) -> list[Exception | None]:
        """One result per binding, in order; the valid ones are stored (one write per resource)."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            try:
                b.validate()
            except InvalidAclError as exc:
                results[i] = exc
                continue
            by_pattern.setdefault(b.pattern, []).append(i)
        for pattern, indexes in by_pattern.items():
            new = frozenset(bindings[i].entry for i in indexes)
            try:
                entries = await self.store.update_acls_async(pattern, lambda current, new=new: current | new)
                self.apply(pattern, entries)
            except Exception as exc:  # noqa: BLE001 - reported per ACL, as Kafka does
                log.warning("could not store ACLs of %s: %s", pattern, exc)
                for i in indexes:
                    results[i] = exc
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | Exception]:
        """Per filter, the ACLs it removed (or why it failed)."""
        results: list[list[AclBinding] | Exception] = []
        for f in filters:
            try:
                f.validate()
            except InvalidAclError as exc:
                results.append(exc)
                continue
            removed: list[AclBinding] = []
            try:
                for pattern in [p for p in self._acls if f.matches_pattern(p)]:
                    gone: set[AccessControlEntry] = set()

                    def drop(current: Entries, gone: set[AccessControlEntry] = gone, f: AclBindingFilter = f) -> Entries:
                        gone.clear()
                        gone.update(e for e in current if f.matches_entry(e))
                        return current - gone

                    entries = await self.store.update_acls_async(pattern, drop)
                    self.apply(pattern, entries)
                    removed.extend(AclBinding(pattern, e) for e in gone)
            except Exception as exc:  # noqa: BLE001 - reported per filter, as Kafka does
                log.warning("could not delete ACLs matching %s: %s", f, exc)
                results.append(exc)
                continue
            results.append(sorted(removed, key=binding_sort_key))
        return results


def create_authorizer(config: BrokerConfig, store: MetadataStore) -> AclAuthorizer | None:
    """The authorizer authorizer.class.name asks for; None (everything allowed) when it is empty."""
    class_name = (config.get("authorizer.class.name") or "").strip()
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASS_NAMES:
        raise AuthorizerConfigError(
            f"Invalid value {class_name} for configuration authorizer.class.name: Strom provides "
            f"{' or '.join(AUTHORIZER_CLASS_NAMES)} (both are its ACL authorizer), or empty for none")
    return AclAuthorizer(store, parse_super_users(config.get("super.users")),
                         bool(config.get("allow.everyone.if.no.acl.found")))


__all__ = ["AUTHORIZER_CLASS_NAMES", "CLUSTER_NAME", "AclAuthorizer", "AuthorizerConfigError", "create_authorizer",
           "parse_super_users"]
