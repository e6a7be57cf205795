"""DescribeUserScramCredentials and AlterUserScramCredentials against the users' entity configs (Kafka's
ZkAdminManager semantics): a credential lives under its mechanism's name next to any other user config (quotas),
which is kept as it is."""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.metadata.store import MetadataStore
from strom.security.credential_cache import USERS
from strom.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_ID,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramFormatter,
)

NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


@dataclass
class UserResult:
    user: str
    error_code: int = NONE
    error_message: str | None = None
    credentials: list[tuple[int, int]] = field(default_factory=list)  # (mechanism id, iterations)


def _credentials(configs: dict[str, str]) -> list[tuple[int, int]]:
    out = []
    for name, (_, wire_id) in MECHANISMS.items():
        text = configs.get(name)
        if text:
            try:
                out.append((wire_id, ScramCredential.from_config(text).iterations))
            except ValueError:
                continue
    return out


def describe(store: MetadataStore, users: list[str] | None) -> list[UserResult]:
    """Every user with SCRAM credentials (users None or empty), or the named ones."""
    every = store.all_entity_configs(USERS)
    if not users:
        found = [UserResult(name, credentials=creds) for name, configs in sorted(every.items())
                 if "/" not in name and (creds := _credentials(configs))]
        return found
    results = []
    duplicates = {u for u in users if users.count(u) > 1}
    for user in dict.fromkeys(users):
        if user in duplicates:
            results.append(UserResult(user, DUPLICATE_RESOURCE, f"Cannot describe SCRAM credentials for the same "
                                                                f"user twice in a single request: {user}"))
            continue
        creds = _credentials(every.get(user, {}))
        if not creds:
            results.append(UserResult(user, RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that "
                                                                f"does not exist: {user}"))
        else:
            results.append(UserResult(user, credentials=creds))
    return results


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion({self.user!r}, mechanism={self.mechanism}, iterations={self.iterations})"


def _check(user: str, mechanism: int, iterations: int | None, salt: bytes = b"x",
           salted: bytes = b"x") -> tuple[int, str] | None:
    if not user:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_BY_ID:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations is not None:
        if iterations < MIN_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
        if iterations > MAX_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
        if not salt or not salted:
            return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


async def alter(store: MetadataStore, deletions: list[tuple[str, int]],
                upsertions: list[Upsertion]) -> list[UserResult]:
    """Apply every valid change, one entity write per user; a user with any invalid change is left alone."""
    results: dict[str, UserResult] = {}
    seen: dict[tuple[str, int], int] = {}
    for user, mechanism in deletions:
        seen[(user, mechanism)] = seen.get((user, mechanism), 0) + 1
    for u in upsertions:
        seen[(u.user, u.mechanism)] = seen.get((u.user, u.mechanism), 0) + 1
    for (user, mechanism), count in seen.items():
        if count > 1 and user not in results:
            name = MECHANISM_BY_ID.get(mechanism, str(mechanism))
            results[user] = UserResult(user, DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the "
                                                                 f"same request: {user} {name}")
    for user, mechanism in deletions:
        if user not in results and (problem := _check(user, mechanism, None)):
            results[user] = UserResult(user, *problem)
    for u in upsertions:
        if u.user not in results and (problem := _check(u.user, u.mechanism, u.iterations, u.salt,
                                                         u.salted_password)):
            results[u.user] = UserResult(u.user, *problem)
    every = store.all_entity_configs(USERS)
    changes: dict[str, dict[str, str]] = {}
    for user, mechanism in deletions:
        if user in results:
            continue
        name = MECHANISM_BY_ID[mechanism]
        configs = changes.setdefault(user, dict(every.get(user, {})))
        if name not in configs:
            results[user] = UserResult(user, RESOURCE_NOT_FOUND, f"Attempt to delete a user credential that does "
                                                                 f"not exist: {user} {name}")
            continue
        del configs[name]
    for u in upsertions:
        if u.user in results:
            continue
        name = MECHANISM_BY_ID[u.mechanism]
        credential = ScramFormatter.for_mechanism(name).credential_from_salted(u.salt, u.salted_password,
                                                                               u.iterations)
        changes.setdefault(u.user, dict(every.get(u.user, {})))[name] = credential.to_config()
    for user, configs in changes.items():
        if user in results:
            continue
        await store.set_entity_configs_async(USERS, user, configs)
        results[user] = UserResult(user)
    order = list(dict.fromkeys([u for u, _ in deletions] + [u.user for u in upsertions]))
    return [results[user] for user in order]
