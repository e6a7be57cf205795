"""AclAuthorizer decisions: Kafka's rules, checked one at a time against an embedded metadata store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.metadata.embedded import EmbeddedMetadataStore
from strom.metadata.zk import zk_data as zd
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
    decode_acls,
    encode_acls,
)
from strom.security.authorizer import AclAuthorizer, create_authorizer, parse_super_users
from strom.security.principal import KafkaPrincipal

Op, Perm, Res, Pat = AclOperation, AclPermissionType, ResourceType, PatternType
ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"


def acl(res: ResourceType, name: str, principal: str = "User:alice", op: AclOperation = Op.READ,
        perm: AclPermissionType = Perm.ALLOW, pattern: PatternType = Pat.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(res, name, pattern), AccessControlEntry(principal, host, op, perm))


def make(tmp_path: Path, *bindings: AclBinding, super_users: tuple[str, ...] = (),
         allow_everyone: bool = False) -> AclAuthorizer:
    authorizer = AclAuthorizer(EmbeddedMetadataStore(tmp_path, 0), super_users, allow_everyone)
    authorizer.start()
    if bindings:
        results = asyncio.run(authorizer.create_acls(list(bindings)))
        assert results == [None] * len(bindings)
    return authorizer


def test_allow_literal_and_nothing_else(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "orders"))
    assert a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders")
    assert not a.authorize(BOB, HOST, Op.READ, Res.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders2")  # literal is not a prefix
    assert not a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "orders")  # another resource type


def test_deny_beats_allow(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "orders", op=Op.ALL), acl(Res.TOPIC, "orders", op=Op.WRITE, perm=Perm.DENY))
    assert a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders")
    assert not a.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "orders")
    # a DENY from a wildcard or prefix pattern beats a literal ALLOW too
    a = make(tmp_path / "2", acl(Res.TOPIC, "orders"), acl(Res.TOPIC, "ord", op=Op.ALL, perm=Perm.DENY,
                                                          pattern=Pat.PREFIXED))
    assert not a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders")


def test_deny_of_read_does_not_deny_describe(tmp_path: Path) -> None:
    """Implication works for ALLOW only: Kafka denies exactly the operation named (or All)."""
    a = make(tmp_path, acl(Res.TOPIC, "t", op=Op.DESCRIBE), acl(Res.TOPIC, "t", op=Op.READ, perm=Perm.DENY))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_implied(tmp_path: Path, granted: AclOperation) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "t", op=granted))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")


def test_describe_configs_implied_by_alter_configs_and_all_covers_everything(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "t", op=Op.ALTER_CONFIGS), acl(Res.CLUSTER, "kafka-cluster", op=Op.ALL))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "t")  # AlterConfigs does not imply Describe
    for op in (Op.CREATE, Op.CLUSTER_ACTION, Op.ALTER, Op.DESCRIBE, Op.IDEMPOTENT_WRITE):
        assert a.authorize(ALICE, HOST, op, Res.CLUSTER, "kafka-cluster")


def test_prefixed_pattern(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.GROUP, "app-", pattern=Pat.PREFIXED))
    assert a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "app-1")
    assert a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "app-")
    assert not a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "app")
    assert not a.authorize(ALICE, HOST, Op.READ, Res.GROUP, "other-app-1")


def test_wildcard_principal_and_resource(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "*", principal="User:*"))
    assert a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "anything")
    assert a.authorize(BOB, HOST, Op.READ, Res.TOPIC, "other")
    assert not a.authorize(BOB, HOST, Op.WRITE, Res.TOPIC, "other")
    # a literal topic named "*" in a request is not a wildcard for other patterns' sake
    b = make(tmp_path / "2", acl(Res.TOPIC, "orders"))
    assert not b.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "*")


def test_hosts(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "t", host="10.0.0.1"), acl(Res.TOPIC, "t", op=Op.WRITE, host="*"),
             acl(Res.TOPIC, "t", op=Op.WRITE, perm=Perm.DENY, host="10.0.0.9"))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, Res.TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, Res.TOPIC, "t")
    assert a.authorize(ALICE, "10.0.0.2", Op.WRITE, Res.TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.9", Op.WRITE, Res.TOPIC, "t")


def test_super_users(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "t", principal="User:admin", op=Op.ALL, perm=Perm.DENY),
             super_users=tuple(parse_super_users(" User:admin ; User:ops;")))
    admin = KafkaPrincipal("User", "admin")
    assert a.authorize(admin, HOST, Op.WRITE, Res.TOPIC, "t")  # even a DENY does not stop a super user
    assert a.authorize(KafkaPrincipal("User", "ops"), HOST, Op.CLUSTER_ACTION, Res.CLUSTER, "kafka-cluster")
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE, Res.CLUSTER, "kafka-cluster")


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    strict = make(tmp_path / "a")
    assert not strict.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    lax = make(tmp_path / "b", acl(Res.TOPIC, "guarded", principal="User:bob"), allow_everyone=True)
    assert lax.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "open")  # no ACL names it
    assert not lax.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "guarded")  # an ACL exists, for someone else


def test_changes_take_effect_and_clear_memoised_decisions(tmp_path: Path) -> None:
    a = make(tmp_path)
    assert not a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    asyncio.run(a.create_acls([acl(Res.TOPIC, "t")]))
    assert a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")
    removed = asyncio.run(a.delete_acls([AclBindingFilter(Res.TOPIC, "t")]))
    assert removed == [[acl(Res.TOPIC, "t")]]
    assert not a.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_acls_survive_a_restart_of_the_store(tmp_path: Path) -> None:
    make(tmp_path, acl(Res.TOPIC, "t", pattern=Pat.PREFIXED))
    again = make(tmp_path)
    assert again.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t1")


def test_filters(tmp_path: Path) -> None:
    lit, wild, pre = acl(Res.TOPIC, "orders"), acl(Res.TOPIC, "*", principal="User:bob"), \
        acl(Res.TOPIC, "ord", op=Op.WRITE, pattern=Pat.PREFIXED)
    a = make(tmp_path, lit, wild, pre, acl(Res.GROUP, "g"))
    assert a.acls(AclBindingFilter(Res.TOPIC, "orders", Pat.MATCH)) == sorted([lit, wild, pre], key=_key)
    assert a.acls(AclBindingFilter(Res.TOPIC, "orders", Pat.ANY)) == [lit]
    assert a.acls(AclBindingFilter(Res.TOPIC, None, Pat.PREFIXED)) == [pre]
    assert a.acls(AclBindingFilter(principal="User:bob")) == [wild]
    assert a.acls(AclBindingFilter(operation=Op.WRITE)) == [pre]
    assert len(a.acls(AclBindingFilter())) == 4


def _key(b: AclBinding) -> tuple:
    from strom.security.acl import binding_sort_key
    return binding_sort_key(b)


@pytest.mark.parametrize("bad", [
    acl(Res.CLUSTER, "other"), acl(Res.TOPIC, ""), acl(Res.TOPIC, "t", pattern=Pat.MATCH),
    acl(Res.TOPIC, "t", op=Op.ANY), acl(Res.TOPIC, "t", perm=Perm.ANY), acl(Res.TOPIC, "t", principal="alice"),
    acl(Res.GROUP, "g", op=Op.WRITE), acl(Res.ANY, "t"),
])
def test_invalid_acls_are_refused(tmp_path: Path, bad: AclBinding) -> None:
    a = make(tmp_path)
    [result] = asyncio.run(a.create_acls([bad]))
    assert isinstance(result, InvalidAclError)
    assert a.acls(AclBindingFilter()) == []


def test_authorize_by_resource_type(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "logs-", op=Op.WRITE, pattern=Pat.PREFIXED))
    assert a.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not a.authorize_by_resource_type(BOB, HOST, Op.WRITE, Res.TOPIC)
    b = make(tmp_path / "2", acl(Res.TOPIC, "logs-a", op=Op.WRITE),
             acl(Res.TOPIC, "logs-", op=Op.WRITE, perm=Perm.DENY, pattern=Pat.PREFIXED))
    assert not b.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)


def test_authorized_operations(tmp_path: Path) -> None:
    a = make(tmp_path, acl(Res.TOPIC, "t", op=Op.WRITE), acl(Res.GROUP, "g", op=Op.ALL))
    assert a.authorized_operations(ALICE, HOST, Res.TOPIC, "t") == {int(Op.WRITE), int(Op.DESCRIBE)}
    assert a.authorized_operations(ALICE, HOST, Res.GROUP, "g") == {int(Op.READ), int(Op.DESCRIBE), int(Op.DELETE)}


def test_zookeeper_json_and_paths_are_kafkas() -> None:
    entries = frozenset({AccessControlEntry("User:alice", "*", Op.DESCRIBE_CONFIGS, Perm.ALLOW)})
    assert json.loads(encode_acls(entries)) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "DescribeConfigs", "host": "*"}]}
    assert decode_acls(encode_acls(entries)) == entries
    assert zd.acl_path(ResourcePattern(Res.TRANSACTIONAL_ID, "tx", Pat.LITERAL)) == "/kafka-acl/TransactionalId/tx"
    prefixed = ResourcePattern(Res.TOPIC, "orders-", Pat.PREFIXED)
    assert zd.acl_path(prefixed) == "/kafka-acl-extended/prefixed/Topic/orders-"
    assert zd.decode_acl_change(zd.EXTENDED_ACL_CHANGES_PATH, zd.encode_acl_change(prefixed)) == prefixed
    literal = ResourcePattern(Res.GROUP, "g:1", Pat.LITERAL)
    assert zd.encode_acl_change(literal) == b"GROUP:g:1"
    assert zd.decode_acl_change(zd.ACL_CHANGES_PATH, b"Group:g:1") == literal


def test_authorizer_class_names(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path, 0)
    assert create_authorizer(BrokerConfig({}), store) is None
    for name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        assert isinstance(create_authorizer(BrokerConfig({"authorizer.class.name": name}), store), AclAuthorizer)
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        BrokerConfig({"authorizer.class.name": "com.example.MyAuthorizer"})
