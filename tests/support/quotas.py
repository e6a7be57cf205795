"""Client quota admin requests (AlterClientQuotas, DescribeClientQuotas) over a bare socket, for tests."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode

Entity = list[tuple[str, str | None]]  # (entity type, name or None for the default)


def alter_quotas(broker: BrokerProcess, entity: Entity, ops: dict[str, float | None], validate_only: bool = False,
                 version: int = 1) -> Any:
    """Set (a number) or remove (None) quota keys of one entity; the response's entry."""
    entry = AlterClientQuotasRequest.EntryData
    req = AlterClientQuotasRequest(validate_only=validate_only, entries=[entry(
        entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[entry.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()])])
    client = RawClient(broker, client_id="quota-admin")
    try:
        return decode(AlterClientQuotasResponse, client.request(req, version), version, version >= 1).entries[0]
    finally:
        client.close()


def set_quotas(broker: BrokerProcess, entity: Entity, ops: dict[str, float | None]) -> None:
    result = alter_quotas(broker, entity, ops)
    assert result.error_code == 0, result.error_message


def describe_quotas(broker: BrokerProcess, components: list[tuple[str, int, str | None]], strict: bool = False,
                    version: int = 1) -> Any:
    """(entity type, match type 0 exact / 1 default / 2 any, name) filters; the whole response."""
    req = DescribeClientQuotasRequest(strict=strict, components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components])
    client = RawClient(broker, client_id="quota-admin")
    try:
        return decode(DescribeClientQuotasResponse, client.request(req, version), version, version >= 1)
    finally:
        client.close()


def described(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """A DescribeClientQuotas response as {entity: {key: value}}."""
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries or []}
