"""SCRAM credentials by user, read from the users' entity configs (Kafka's CredentialCache).

Kafka keeps a user's credentials in `/config/users/<name>` under the mechanism's name; the metadata store's entity
listener tells every broker when one changes, so a new or changed password works at once, without a restart.
"""

from __future__ import annotations

import logging

from strom.metadata.store import MetadataStore
from strom.security.scram import MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

USERS = "users"


class CredentialCache:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._parsed: dict[tuple[str, str], ScramCredential | None] = {}
        store.add_entity_listener(self._changed)

    def _changed(self, entity_type: str, name: str) -> None:
        if entity_type == USERS:
            for mechanism in MECHANISMS:
                self._parsed.pop((name, mechanism), None)

    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        key = (username, mechanism)
        if key in self._parsed:
            return self._parsed[key]
        text = self._store.entity_configs(USERS, username).get(mechanism)
        credential = None
        if text:
            try:
                credential = ScramCredential.from_config(text)
            except ValueError as exc:
                log.warning("ignoring the %s credential of user %s: %s", mechanism, username, exc)
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[key] = credential
        return credential
