"""Quota entities: how a (user, client-id) pair is named in the client entity configs, and which
configured entity a connection's quota comes from (KIP-55's precedence, most specific first).

Entity configs live in the metadata store as Kafka keeps them in ZooKeeper: `/config/users/<user>`,
`/config/users/<user>/clients/<client-id>` (stored as the users entity `<user>/clients/<client-id>`)
and `/config/clients/<client-id>`, where `<default>` names the default entity. Names are sanitized
as Kafka's `Sanitizer` does (URL encoding), so a client id with a `/` cannot escape its node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

DEFAULT = "<default>"
USERS = "users"  # store entity types (ZooKeeper's /config/<type>)
CLIENTS = "clients"
USER = "user"  # wire entity types (DescribeClientQuotas, AlterClientQuotas)
CLIENT_ID = "client-id"
NESTED = "/clients/"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# Quota keys and whether their values are whole numbers (Kafka's LONG) or not (DOUBLE).
QUOTA_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL encoding with `*` and `~` encoded too, so the result is a safe znode name."""
    return quote(name, safe="").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    return unquote(name)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A configured entity. Each part is None (not part of the entity), DEFAULT, or a name."""

    user: str | None
    client_id: str | None

    def store_key(self) -> tuple[str, str]:
        """(entity type, name) in the metadata store."""
        if self.user is None:
            assert self.client_id is not None
            return CLIENTS, _store_name(self.client_id)
        if self.client_id is None:
            return USERS, _store_name(self.user)
        return USERS, f"{_store_name(self.user)}{NESTED}{_store_name(self.client_id)}"

    def wire(self) -> list[tuple[str, str | None]]:
        """The entity as the admin APIs spell it: (type, name or None for the default)."""
        out: list[tuple[str, str | None]] = []
        if self.user is not None:
            out.append((USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append((CLIENT_ID, None if self.client_id == DEFAULT else self.client_id))
        return out

    @classmethod
    def from_store(cls, entity_type: str, name: str) -> QuotaEntity | None:
        if entity_type == CLIENTS:
            return cls(None, _entity_name(name))
        if entity_type != USERS:
            return None
        user, sep, client = name.partition(NESTED)
        return cls(_entity_name(user), _entity_name(client) if sep else None)


def _store_name(name: str) -> str:
    return name if name == DEFAULT else sanitize(name)


def _entity_name(stored: str) -> str:
    return stored if stored == DEFAULT else desanitize(stored)


def stored_entities(store_configs: Mapping[str, Mapping[str, Mapping[str, str]]]
                    ) -> Iterator[tuple[QuotaEntity, dict[str, str]]]:
    """Every entity with quota keys, from {store type: {store name: configs}}; other keys (credentials) left out."""
    for entity_type, names in store_configs.items():
        for name, configs in names.items():
            entity = QuotaEntity.from_store(entity_type, name)
            quotas = {k: v for k, v in configs.items() if k in QUOTA_KEYS}
            if entity is not None and quotas:
                yield entity, quotas


def precedence(user: str, client_id: str) -> tuple[tuple[QuotaEntity, tuple[str, str]], ...]:
    """KIP-55's eight levels for a connection, most specific first, each with the key of the rate it
    shares: a quota set on a user alone is shared by all that user's clients, a default one is not."""
    both = (user, client_id)
    return (
        (QuotaEntity(user, client_id), both),
        (QuotaEntity(user, DEFAULT), both),
        (QuotaEntity(user, None), (user, "")),
        (QuotaEntity(DEFAULT, client_id), both),
        (QuotaEntity(DEFAULT, DEFAULT), both),
        (QuotaEntity(DEFAULT, None), (user, "")),
        (QuotaEntity(None, client_id), ("", client_id)),
        (QuotaEntity(None, DEFAULT), ("", client_id)),
    )
