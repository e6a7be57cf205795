"""DescribeClientQuotas and AlterClientQuotas over the client entity configs (Kafka's ZkAdminManager part).

Only the quota keys of an entity are read or written here: a user entity may also hold SCRAM
credentials, which an alteration keeps as they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import kafka.errors as Errors

from strom.broker.quota.entity import (
    CLIENT_ID,
    CLIENTS,
    DEFAULT,
    QUOTA_KEYS,
    USER,
    USERS,
    QuotaEntity,
    stored_entities,
)
from strom.metadata.store import MetadataStore

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
INVALID_REQUEST = Errors.InvalidRequestError.errno


class QuotaRequestError(Exception):
    """Bad input: answered with INVALID_REQUEST and this message."""


@dataclass(slots=True)
class QuotaAlteration:
    entity: list[tuple[str, str | None]]  # as sent: (entity type, name or None = default)
    ops: list[tuple[str, float, bool]]  # (key, value, remove)
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class QuotaFilter:
    components: list[tuple[str, int, str | None]] = field(default_factory=list)  # (type, match type, match)
    strict: bool = False


def _entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    names: dict[str, str] = {}
    for entity_type, name in parts:
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
        if entity_type in names:
            raise QuotaRequestError(f"Duplicate {entity_type} entity in the quota entity")
        if name == "":
            raise QuotaRequestError(f"Empty {entity_type} name; use null for the default entity")
        names[entity_type] = DEFAULT if name is None else name
    if not names:
        raise QuotaRequestError("Empty quota entity")
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


def _stored_value(key: str, value: float) -> str:
    """Kafka's string forms: whole numbers for byte rates (LONG), a float for request_percentage."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise QuotaRequestError(f"Quota {key} must be a positive number, not {value}")
    if whole:
        if value != int(value) or value > 2**63 - 1:
            raise QuotaRequestError(f"Configuration {key} must be a Long value")
        return str(int(value))
    return repr(float(value))


def _new_configs(current: dict[str, str], ops: list[tuple[str, float, bool]]) -> dict[str, str]:
    configs = dict(current)
    seen: set[str] = set()
    for key, value, remove in ops:
        if key in seen:
            raise QuotaRequestError(f"Duplicate quota key {key}")
        seen.add(key)
        if key not in QUOTA_KEYS:
            raise QuotaRequestError(f"Invalid configuration key {key}")
        if remove:
            configs.pop(key, None)
        else:
            configs[key] = _stored_value(key, value)
    return configs


async def alter_client_quotas(store: MetadataStore, alterations: list[QuotaAlteration], validate_only: bool) -> None:
    """Apply each alteration on its own, filling in its error; one bad entry leaves the others alone."""
    for alteration in alterations:
        try:
            entity = _entity(alteration.entity)
            entity_type, name = entity.store_key()
            configs = _new_configs(await store.read_entity_configs_async(entity_type, name), alteration.ops)
            if not validate_only:
                await store.set_entity_configs_async(entity_type, name, configs)
        except QuotaRequestError as exc:
            alteration.error_code, alteration.error_message = INVALID_REQUEST, str(exc)
        except Errors.KafkaError as exc:
            alteration.error_code = getattr(exc, "errno", Errors.UnknownError.errno)
            alteration.error_message = str(exc) or None


def _component_matches(value: str | None, match_type: int, match: str | None) -> bool:
    if match_type == MATCH_EXACT:
        return value == match
    if match_type == MATCH_DEFAULT:
        return value == DEFAULT
    return value is not None


def _check_filter(quota_filter: QuotaFilter) -> dict[str, tuple[int, str | None]]:
    by_type: dict[str, tuple[int, str | None]] = {}
    for entity_type, match_type, match in quota_filter.components:
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Custom entity type {entity_type!r} not supported")
        if entity_type in by_type:
            raise QuotaRequestError(f"Duplicate {entity_type} filter component entity type")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError(f"Exact match of {entity_type} needs a name")
        elif match_type in (MATCH_DEFAULT, MATCH_ANY):
            if match is not None:
                raise QuotaRequestError(f"Match type {match_type} of {entity_type} takes no name")
        else:
            raise QuotaRequestError(f"Unknown match type {match_type}")
        by_type[entity_type] = (match_type, match)
    return by_type


def describe_client_quotas(store: MetadataStore, quota_filter: QuotaFilter
                           ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    """Entities with quotas that match the filter, each with its quota values."""
    by_type = _check_filter(quota_filter)
    configs = {USERS: store.all_entity_configs(USERS), CLIENTS: store.all_entity_configs(CLIENTS)}
    out = []
    for entity, quotas in stored_entities(configs):
        ok = True
        for entity_type, value in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
            component = by_type.get(entity_type)
            if component is None:
                ok = not (quota_filter.strict and value is not None)
            else:
                ok = _component_matches(value, *component)
            if not ok:
                break
        if ok:
            out.append((entity.wire(), {k: n for k, v in quotas.items() if (n := _number(v)) is not None}))
    out.sort(key=lambda e: [(t, "" if n is None else n) for t, n in e[0]])
    return out


def _number(text: str) -> float | None:
    """A stored value as a number; None for one that is not (written by hand into ZooKeeper)."""
    try:
        return float(text)
    except ValueError:
        return None
