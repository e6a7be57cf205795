"""`strom configs --entity-type users`: SCRAM credentials, as kafka-configs.sh manages them.

`--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'`
creates or replaces credentials (the client salts the password; only the salted form travels),
`--delete-config SCRAM-SHA-512` removes one, `--describe` lists mechanisms and iterations.
With `--zookeeper host:port[/chroot]` instead of a broker, credentials are written straight into ZooKeeper, as
Kafka's tool does to create the brokers' own SCRAM user before they start.
"""

from __future__ import annotations

from typing import Any

from strom.cli.common import describe_kafka_error, fail, write_out

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism.SCRAM_SHA_256 if name == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512


def _scram_settings(mechanism: str, text: str) -> tuple[int, str]:
    """`iterations=8192,password=secret` (Kafka's bracketed value) -> (iterations, password)."""
    settings: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            fail(f"Invalid value for {mechanism}: expected [iterations=N,password=P]")
        settings[key.strip()] = value
    unknown = sorted(set(settings) - {"iterations", "password"})
    if unknown:
        fail(f"Invalid value for {mechanism}: unknown setting {unknown[0]} (iterations, password)")
    if not settings.get("password"):
        fail(f"{mechanism} needs a password: {mechanism}=[password=...]")
    try:
        iterations = int(settings.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        fail(f"Invalid iterations for {mechanism}: {settings['iterations']}")
    return iterations, settings["password"]


def alter_users(admin: Any, user: str | None, add: dict[str, str], delete: list[str]) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    user = _check_changes(user, add, delete)
    alterations: list[Any] = []
    for mechanism, text in add.items():
        iterations, password = _scram_settings(mechanism, text)
        alterations.append(UserScramCredentialUpsertion(
            user, ScramCredentialInfo(_mechanism(mechanism), iterations), password.encode("utf-8")))
    alterations += [UserScramCredentialDeletion(user, _mechanism(m)) for m in delete]
    try:
        for future in admin.alter_user_scram_credentials(alterations, request_timeout=30).values():
            future.result()
    except KafkaException as exc:
        fail(f"Could not update SCRAM credentials of user {user}: {describe_kafka_error(exc)}")
    write_out(f"Completed updating config for user {user}.\n")


def describe_users(admin: Any, user: str | None) -> None:
    from confluent_kafka import KafkaException

    try:
        if user is None:
            found = admin.describe_user_scram_credentials(request_timeout=30).result()
        else:
            found = {user: admin.describe_user_scram_credentials([user], request_timeout=30)[user].result()}
    except KafkaException as exc:
        if user is not None and "RESOURCE_NOT_FOUND" in str(exc):
            write_out(f"SCRAM credential configs for user-principal '{user}' are \n")
            return
        fail(f"Could not describe SCRAM credentials: {describe_kafka_error(exc)}")
    for name in sorted(found):
        infos = sorted(found[name].scram_credential_infos, key=lambda i: i.mechanism.value)
        creds = ", ".join(f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}" for i in infos)
        write_out(f"SCRAM credential configs for user-principal '{name}' are {creds}\n")


def _check_changes(user: str | None, add: dict[str, str], delete: list[str]) -> str:
    if not user:
        fail("--alter --entity-type users needs --entity-name.")
    other = sorted(k for k in [*add, *delete] if k not in SCRAM_MECHANISMS)
    if other:
        fail(f"Unsupported user config {other[0]}: this tool manages {' and '.join(SCRAM_MECHANISMS)} credentials.")
    both = set(add) & set(delete)
    if both:
        fail(f"A config cannot be both added and deleted: {', '.join(sorted(both))}.")
    return user


def _zookeeper(connect: str) -> Any:
    from strom.metadata.zk.errors import KafkaZkError
    from strom.metadata.zk.kafka_zk_client import KafkaZkClient

    try:
        return KafkaZkClient(connect, session_timeout_ms=10_000).start()
    except KafkaZkError as exc:
        fail(str(exc))


def alter_users_in_zookeeper(connect: str, user: str | None, add: dict[str, str], delete: list[str]) -> None:
    """Salt and store the credentials here (the password never leaves this process), keeping other configs."""
    from strom.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramFormatter

    name = _check_changes(user, add, delete)
    zk = _zookeeper(connect)
    try:
        configs = zk.get_entity_configs("users", name)
        for mechanism, text in add.items():
            iterations, password = _scram_settings(mechanism, text)
            if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                fail(f"Invalid iterations for {mechanism}: {iterations} (between {MIN_ITERATIONS} and "
                     f"{MAX_ITERATIONS})")
            configs[mechanism] = ScramFormatter.for_mechanism(mechanism).credential(password, iterations).to_config()
        for mechanism in delete:
            if configs.pop(mechanism, None) is None:
                fail(f"User {name} has no {mechanism} credential.")
        zk.set_entity_configs("users", name, configs)
    finally:
        zk.close()
    write_out(f"Completed updating config for user {name}.\n")


def describe_users_in_zookeeper(connect: str, user: str | None) -> None:
    from strom.security.scram import ScramCredential

    zk = _zookeeper(connect)
    try:
        every = zk.get_all_entity_configs("users") if user is None else {user: zk.get_entity_configs("users", user)}
    finally:
        zk.close()
    for name in sorted(every):
        creds = [f"{m}=iterations={ScramCredential.from_config(every[name][m]).iterations}"
                 for m in SCRAM_MECHANISMS if every[name].get(m)]
        if creds or user is not None:
            write_out(f"SCRAM credential configs for user-principal '{name}' are {', '.join(creds)}\n")
