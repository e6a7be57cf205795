"""`strom acls`: add, list and remove ACLs (like kafka-acls.sh), through the DescribeAcls, CreateAcls and
DeleteAcls APIs of a running broker.

Flags and output follow Kafka's AclCommand: principals and hosts with --allow-*/--deny-*, repeatable
--operation (default All), resources with --topic/--group/--cluster/--transactional-id, and the --producer /
--consumer shortcuts (producer: Write, Describe, Create on topics, Write and Describe on transactional ids,
IdempotentWrite on the cluster with --idempotent; consumer: Read, Describe on topics, Read on groups).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from strom.cli.common import BootstrapOption, CommandConfigOption, admin_client, cli_errors, fail, write_out
from strom.security.acl import CLUSTER_NAME, WILDCARD_HOST
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res

_OPERATIONS = [o for o in Op if o not in (Op.UNKNOWN, Op.ANY)]


def acls(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    add: Annotated[bool, typer.Option("--add", help="Add ACLs.")] = False,
    remove: Annotated[bool, typer.Option("--remove", help="Remove ACLs.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List ACLs (of the named resources, or all).")] = False,
    allow_principal: Annotated[list[str] | None, typer.Option(
        "--allow-principal", help="Principal (User:name, User:* for all) to allow; repeatable.")] = None,
    deny_principal: Annotated[list[str] | None, typer.Option(
        "--deny-principal", help="Principal to deny; repeatable.")] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Host (IP) the allow applies to; default * when a principal is given.")] = None,
    deny_host: Annotated[list[str] | None, typer.Option(
        "--deny-host", help="Host (IP) the deny applies to; default * when a principal is given.")] = None,
    principal: Annotated[str | None, typer.Option(
        "--principal", help="With --list: only ACLs of this principal.")] = None,
    operation: Annotated[list[str] | None, typer.Option(
        "--operation", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite or All (default); repeatable.")] = None,
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Topic (* for all); repeatable.")] = None,
    group: Annotated[list[str] | None, typer.Option("--group", help="Consumer group (* for all); repeatable.")] = None,
    cluster: Annotated[bool, typer.Option("--cluster", help="The cluster resource.")] = False,
    transactional_id: Annotated[list[str] | None, typer.Option(
        "--transactional-id", help="Transactional id (* for all); repeatable.")] = None,
    resource_pattern_type: Annotated[str | None, typer.Option(
        "--resource-pattern-type",
        help="literal or prefixed (add/remove; default literal); also any or match (list/remove).")] = None,
    producer: Annotated[bool, typer.Option("--producer", help="The ACLs a producer needs.")] = False,
    consumer: Annotated[bool, typer.Option("--consumer", help="The ACLs a consumer needs (needs --group).")] = False,
    idempotent: Annotated[bool, typer.Option(
        "--idempotent", help="With --producer: also IdempotentWrite on the cluster.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Remove without asking.")] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Add, list or remove ACLs."""
    from confluent_kafka.admin import ResourcePatternType

    with cli_errors():
        if sum((add, remove, list_)) != 1:
            fail("Command must include exactly one action: --list, --add, --remove.")
        if (producer or consumer) and not add and not remove:
            fail("--producer and --consumer are only for --add and --remove.")
        if consumer and not group:
            fail("--consumer needs --group.")
        default_pattern = "any" if list_ else "literal"
        pattern_name = (resource_pattern_type or default_pattern).lower()
        if pattern_name not in ("literal", "prefixed", "any", "match"):
            fail(f"Invalid --resource-pattern-type '{resource_pattern_type}': literal, prefixed, any or match.")
        if add and pattern_name not in ("literal", "prefixed"):
            fail("--add needs --resource-pattern-type literal or prefixed.")
        pattern = getattr(ResourcePatternType, pattern_name.upper())
        resources = _resources(topic, group, cluster, transactional_id)
        admin = admin_client(bootstrap_server, command_config)
        if list_:
            _list(admin, resources, pattern, principal)
            return
        if not resources:
            fail("Name a resource: --topic, --group, --cluster or --transactional-id.")
        if producer or consumer:
            wanted = _shortcut_acls(resources, producer, consumer, idempotent)
        else:
            ops = [_operation(o) for o in operation or ["All"]]
            wanted = {r: ops for r in resources}
        entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
        if add and not entries:
            fail("--add needs --allow-principal or --deny-principal.")
        if add:
            _add(admin, wanted, entries, pattern)
        else:
            _remove(admin, wanted, entries, pattern, force, bool(producer or consumer),
                    bool(operation))


def _line(text: str) -> None:
    write_out(text + "\n")


def _operation(text: str) -> Op:
    try:
        op = Op.parse(text)
    except ValueError:
        fail(f"Invalid --operation '{text}': one of {', '.join(o.camel for o in _OPERATIONS)}.")
    if op in (Op.UNKNOWN, Op.ANY):
        fail(f"Invalid --operation '{text}'.")
    return op


def _resources(topics: list[str] | None, groups: list[str] | None, cluster: bool,
               transactional_ids: list[str] | None) -> list[tuple[Res, str]]:
    out = [(Res.TOPIC, t) for t in topics or []] + [(Res.GROUP, g) for g in groups or []]
    out += [(Res.TRANSACTIONAL_ID, t) for t in transactional_ids or []]
    if cluster:
        out.append((Res.CLUSTER, CLUSTER_NAME))
    for _, name in out:
        if not name:
            fail("Resource names must not be empty.")
    return out


def _shortcut_acls(resources: list[tuple[Res, str]], producer: bool, consumer: bool,
                   idempotent: bool) -> dict[tuple[Res, str], list[Op]]:
    wanted: dict[tuple[Res, str], list[Op]] = {}
    for r in resources:
        ops: list[Op] = []
        if r[0] == Res.TOPIC:
            ops += [Op.WRITE, Op.DESCRIBE, Op.CREATE] if producer else []
            ops += [Op.READ, Op.DESCRIBE] if consumer else []
        elif r[0] == Res.GROUP and consumer:
            ops.append(Op.READ)
        elif r[0] == Res.TRANSACTIONAL_ID and producer:
            ops += [Op.WRITE, Op.DESCRIBE]
        if ops:
            wanted[r] = list(dict.fromkeys(ops))
    if producer and idempotent:
        wanted[(Res.CLUSTER, CLUSTER_NAME)] = [Op.IDEMPOTENT_WRITE]
    if not wanted:
        fail("Nothing to do: --producer needs --topic (or --transactional-id), --consumer --topic and --group.")
    return wanted


def _entries(allow_principals: list[str] | None, deny_principals: list[str] | None, allow_hosts: list[str] | None,
             deny_hosts: list[str] | None) -> list[tuple[str, str, bool]]:
    """(principal, host, allow) for every combination, as Kafka's AclCommand builds them."""
    out = []
    for principals, hosts, allow in ((allow_principals, allow_hosts, True), (deny_principals, deny_hosts, False)):
        for p in principals or []:
            kind, sep, name = p.partition(":")
            if not sep or not kind or not name:
                fail(f"Invalid principal '{p}': expected Type:name, e.g. User:alice.")
            for h in hosts or [WILDCARD_HOST]:
                out.append((p, h, allow))
    return out


def _confluent(res: Res) -> Any:
    from confluent_kafka.admin import ResourceType

    return {Res.TOPIC: ResourceType.TOPIC, Res.GROUP: ResourceType.GROUP, Res.CLUSTER: ResourceType.BROKER,
            Res.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID}[res]


def _pattern_for(rt: Res, pattern: Any) -> Any:
    """The cluster is always one LITERAL resource, whatever --resource-pattern-type says (as in Kafka)."""
    from confluent_kafka.admin import ResourcePatternType

    if rt == Res.CLUSTER and pattern.name in ("LITERAL", "PREFIXED"):
        return ResourcePatternType.LITERAL
    return pattern


def _bindings(wanted: dict[tuple[Res, str], list[Op]], entries: list[tuple[str, str, bool]], pattern: Any) -> list:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType

    return [AclBinding(_confluent(rt), name, _pattern_for(rt, pattern), p, h, AclOperation[op.name],
                       AclPermissionType.ALLOW if allow else AclPermissionType.DENY)
            for (rt, name), ops in wanted.items() for op in ops for p, h, allow in entries]


def _add(admin: Any, wanted: dict[tuple[Res, str], list[Op]], entries: list[tuple[str, str, bool]],
         pattern: Any) -> None:
    bindings = _bindings(wanted, entries, pattern)
    for (rt, name), _ops in wanted.items():
        mine = [b for b in bindings if b.name == name and b.restype == _confluent(rt)]
        _line(f"Adding ACLs for resource `{_pattern_text(mine[0])}`: ")
        for b in mine:
            _line(f" \t{_entry_text(b)} ")
        _line("")
    for f in admin.create_acls(bindings).values():
        f.result()
    _list(admin, list(wanted), pattern, None)


def _remove(admin: Any, wanted: dict[tuple[Res, str], list[Op]], entries: list[tuple[str, str, bool]],
            pattern: Any, force: bool, shortcut: bool, ops_given: bool) -> None:
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType

    filters = []
    for (rt, name), ops in wanted.items():
        # No principal and no --operation: every ACL of the resource goes, as in Kafka.
        op_filters = [AclOperation[op.name] for op in ops] if shortcut or ops_given else [AclOperation.ANY]
        targets = [(p, h, AclPermissionType.ALLOW if allow else AclPermissionType.DENY) for p, h, allow in entries] \
            or [(None, None, AclPermissionType.ANY)]
        filters += [AclBindingFilter(_confluent(rt), name, _pattern_for(rt, pattern), p, h, op, perm)
                    for op in op_filters for p, h, perm in targets]
        if not force:
            text = f"resource `{_pattern_text_of(rt, name, _pattern_for(rt, pattern))}`"
            try:
                answer = input(f"Are you sure you want to remove ACLs from {text}? (y/n)\n")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                fail("Aborted: nothing removed.", exit_code=1)
    removed = []
    for f in admin.delete_acls(filters).values():
        removed += f.result()
    for b in removed:
        _line(f"Removed ACL for resource `{_pattern_text(b)}`: {_entry_text(b)}")
    _list(admin, list(wanted), pattern, None)


def _list(admin: Any, resources: list[tuple[Res, str]], pattern: Any, principal: str | None) -> None:
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as CRes

    if resources:
        filters = [AclBindingFilter(_confluent(rt), name, _pattern_for(rt, pattern), principal, None, AclOperation.ANY,
                                    AclPermissionType.ANY) for rt, name in resources]
    else:
        filters = [AclBindingFilter(CRes.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                                    AclPermissionType.ANY)]
    found: dict[str, list[Any]] = {}
    for f in filters:
        for b in admin.describe_acls(f).result():
            found.setdefault(_pattern_text(b), []).append(b)
    for text, bindings in found.items():
        _line(f"Current ACLs for resource `{text}`: ")
        for b in sorted(set(bindings), key=_entry_text):
            _line(f" \t{_entry_text(b)} ")
        _line("")


def _type_name(restype: Any) -> str:
    return "CLUSTER" if restype.name == "BROKER" else restype.name


def _pattern_text(b: Any) -> str:
    return (f"ResourcePattern(resourceType={_type_name(b.restype)}, name={b.name}, "
            f"patternType={b.resource_pattern_type.name})")


def _pattern_text_of(rt: Res, name: str, pattern: Any) -> str:
    return f"ResourcePattern(resourceType={rt.name}, name={name}, patternType={pattern.name})"


def _entry_text(b: Any) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission_type.name})")

