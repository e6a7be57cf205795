"""SCRAM-SHA-256/512: users managed with `strom configs --entity-type users` (AlterUserScramCredentials through
librdkafka, which salts the password client side), logins with every client, changes without a restart."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from strom.security.scram import ScramFormatter
from tests.integration.test_cli import strom
from tests.integration.test_sasl import PLAIN_JAAS, auth_errors
from tests.support.broker import BrokerProcess
from tests.support.raw_client import RawClient, decode
from tests.support.security import ROUND_TRIPS, ClientAuth, create_topic, start_sasl_broker


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_sasl_broker(tmp_path_factory.mktemp("scram"), PLAIN_JAAS)
    try:
        yield broker
    finally:
        broker.close()


def scram(broker: BrokerProcess, mechanism: str, user: str, password: str) -> ClientAuth:
    return ClientAuth(f"127.0.0.1:{broker.sasl_port}", "SASL_PLAINTEXT", mechanism, user, password)


def configs(broker: BrokerProcess, *args: str, command_config: Path | None = None) -> str:
    extra = ["--command-config", str(command_config)] if command_config else []
    done = strom("configs", "--bootstrap-server", broker.bootstrap if command_config is None
                 else f"127.0.0.1:{broker.sasl_port}", *extra, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_users_are_created_described_changed_and_deleted_with_the_cli(scram_broker: BrokerProcess) -> None:
    out = configs(scram_broker, "--alter", "--add-config",
                  "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]",
                  "--entity-type", "users", "--entity-name", "alice")
    assert "Completed updating config for user alice." in out
    out = configs(scram_broker, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert out.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                           "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        auth = scram(scram_broker, mechanism, "alice", "alice-secret")
        assert ROUND_TRIPS["confluent-kafka"](auth, create_topic(auth), 3) == [
            b"confluent-kafka-0", b"confluent-kafka-1", b"confluent-kafka-2"]
    # A new password works at once and the old one stops working, without a restart.
    configs(scram_broker, "--alter", "--add-config", "SCRAM-SHA-512=[password=new-secret]", "--entity-type", "users",
            "--entity-name", "alice")
    assert auth_errors(scram(scram_broker, "SCRAM-SHA-512", "alice", "alice-secret"))
    fresh = scram(scram_broker, "SCRAM-SHA-512", "alice", "new-secret")
    assert len(ROUND_TRIPS["confluent-kafka"](fresh, create_topic(fresh), 1)) == 1
    configs(scram_broker, "--alter", "--delete-config", "SCRAM-SHA-512", "--entity-type", "users",
            "--entity-name", "alice")
    assert auth_errors(fresh)
    out = configs(scram_broker, "--describe", "--entity-type", "users")
    assert "'alice' are SCRAM-SHA-256=iterations=8192\n" in out
    text = scram_broker.log_path.read_text()
    assert "alice-secret" not in text and "new-secret" not in text


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_every_client_logs_in_with_scram_sha_512(scram_broker: BrokerProcess, client: str) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat not installed")
    configs(scram_broker, "--alter", "--add-config", "SCRAM-SHA-512=[password=bob-secret]", "--entity-type", "users",
            "--entity-name", "bob")
    auth = scram(scram_broker, "SCRAM-SHA-512", "bob", "bob-secret")
    assert ROUND_TRIPS[client](auth, create_topic(auth), 4) == [f"{client}-{i}".encode() for i in range(4)]


def test_the_cli_itself_connects_over_sasl_with_java_client_properties(scram_broker: BrokerProcess,
                                                                        tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     "username=\"admin\" password=\"admin-secret\";\n")
    configs(scram_broker, "--alter", "--add-config", "SCRAM-SHA-256=[password=carol-secret]", "--entity-type",
            "users", "--entity-name", "carol", command_config=props)
    out = configs(scram_broker, "--describe", "--entity-type", "users", "--entity-name", "carol",
                  command_config=props)
    assert "'carol' are SCRAM-SHA-256=iterations=4096" in out
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.username=carol\nsasl.password=carol-secret\n")
    done = strom("topics", "--bootstrap-server", f"127.0.0.1:{scram_broker.sasl_port}", "--command-config",
                 str(props), "--list")
    assert done.returncode == 0, done.stderr
    # --describe sends its own Metadata and DescribeConfigs requests: they authenticate the same way.
    sasl = f"127.0.0.1:{scram_broker.sasl_port}"
    created = strom("topics", "--bootstrap-server", sasl, "--command-config", str(props), "--create", "--topic",
                    "scram-cli", "--config", "retention.ms=7200000")
    assert created.returncode == 0, created.stderr
    described = strom("topics", "--bootstrap-server", sasl, "--command-config", str(props), "--describe",
                      "--topic", "scram-cli")
    assert described.returncode == 0 and "Configs: retention.ms=7200000" in described.stdout, described


@pytest.mark.parametrize(("add", "message"), [
    ("SCRAM-SHA-256=[iterations=100,password=x]", "Too few iterations"),
    ("SCRAM-SHA-256=[iterations=99999,password=x]", "Too many iterations"),
    ("SCRAM-SHA-256=[iterations=4096]", "needs a password"),
    ("retries=3", "Invalid quota config 'retries'"),
])
def test_bad_credentials_are_refused_with_a_reason(scram_broker: BrokerProcess, add: str, message: str) -> None:
    done = strom("configs", "--bootstrap-server", scram_broker.bootstrap, "--alter", "--add-config", add,
                 "--entity-type", "users", "--entity-name", "dave")
    assert done.returncode != 0 and message in done.stderr


def test_scram_credential_apis_directly(scram_broker: BrokerProcess) -> None:
    """Errors as Kafka answers them: unknown mechanism, deleting what does not exist, duplicates, unknown users;
    other users' configs are kept."""
    salt = b"s" * 16
    salted = ScramFormatter.for_mechanism("SCRAM-SHA-256").salted_password("erin-secret", salt, 4096)
    up = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    rm = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    req = AlterUserScramCredentialsRequest(
        deletions=[rm(name="nobody", mechanism=1), rm(name="frank", mechanism=7)],
        upsertions=[up(name="erin", mechanism=1, iterations=4096, salt=salt, salted_password=salted),
                    up(name="gina", mechanism=2, iterations=4096, salt=salt, salted_password=salted),
                    up(name="gina", mechanism=2, iterations=4096, salt=salt, salted_password=salted)])
    c = RawClient(scram_broker)
    try:
        resp = decode(AlterUserScramCredentialsResponse, c.request(req, 0), 0, True)
        got = {r.user: (r.error_code, r.error_message) for r in resp.results}
        assert got["erin"] == (0, None)
        assert got["nobody"][0] == 91 and "does not exist" in got["nobody"][1]
        assert got["frank"][0] == 33
        assert got["gina"][0] == 92
        R = DescribeUserScramCredentialsRequest
        resp = decode(DescribeUserScramCredentialsResponse,
                      c.request(R(users=[R.UserName(name="erin"), R.UserName(name="gina")]), 0), 0, True)
        got = {r.user: r for r in resp.results}
        assert [(i.mechanism, i.iterations) for i in got["erin"].credential_infos] == [(1, 4096)]
        assert got["gina"].error_code == 91
    finally:
        c.close()
    auth = scram(scram_broker, "SCRAM-SHA-256", "erin", "erin-secret")
    assert len(ROUND_TRIPS["confluent-kafka"](auth, create_topic(auth), 1)) == 1


def test_tools_speaking_the_protocol_themselves_log_in_with_scram(scram_broker: BrokerProcess,
                                                                   tmp_path: Path) -> None:
    """`--entity-default` goes through Strom's own Kafka client (BrokerClient), which runs the SCRAM exchange."""
    configs(scram_broker, "--alter", "--add-config", "SCRAM-SHA-512=[password=ops-secret]", "--entity-type",
            "users", "--entity-name", "ops")
    props = tmp_path / "ops.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     "username=\"ops\" password=\"ops-secret\";\n")
    out = configs(scram_broker, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                  "log.retention.ms=7200000", command_config=props)
    assert "Completed updating default config" in out
    out = configs(scram_broker, "--describe", "--entity-type", "brokers", "--entity-default", command_config=props)
    assert "log.retention.ms=7200000" in out
    props.write_text(props.read_text().replace("ops-secret", "wrong"))
    done = strom("configs", "--bootstrap-server", f"127.0.0.1:{scram_broker.sasl_port}", "--command-config",
                 str(props), "--describe", "--entity-type", "brokers", "--entity-default")
    assert done.returncode != 0 and "invalid credentials" in done.stderr


def test_configs_help_describes_users_and_zookeeper() -> None:
    done = strom("configs", "--help", COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert "--zookeeper" in done.stdout and "topics, brokers or users" in done.stdout
