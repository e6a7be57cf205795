"""`strom configs` for client quotas, as kafka-configs.sh is used for them."""

from __future__ import annotations

from tests.integration.test_cli import ok, strom
from tests.support.broker import BrokerProcess
from tests.support.quotas import describe_quotas, described


def test_configs_alter_describe_delete_client_quotas(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    done = ok(strom("configs", "--bootstrap-server", b, "--alter", "--add-config",
                    "producer_byte_rate=1048576,consumer_byte_rate=2097152", "--entity-type", "clients",
                    "--entity-name", "cli-app"))
    assert done.stdout.strip() == "Completed updating config for client-id 'cli-app'."
    ok(strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "request_percentage=25",
             "--entity-type", "clients", "--entity-default"))
    ok(strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "consumer_byte_rate=1000",
             "--entity-type", "users", "--entity-name", "alice"))
    ok(strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "producer_byte_rate=500",
             "--user", "alice", "--client", "cli-app"))
    # What the broker holds, read with the protocol rather than the tool.
    assert described(describe_quotas(broker, [("client-id", 0, "cli-app")], strict=True)) == {
        (("client-id", "cli-app"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}}

    one = ok(strom("configs", "--bootstrap-server", b, "--describe", "--entity-type", "clients",
                   "--entity-name", "cli-app")).stdout
    assert one.strip() == ("Quota configs for client-id 'cli-app' are consumer_byte_rate=2097152.0, "
                           "producer_byte_rate=1048576.0")
    every = ok(strom("configs", "--bootstrap-server", b, "--describe", "--entity-type", "clients")).stdout
    assert "Quota configs for the default client-id are request_percentage=25.0" in every
    assert "client-id 'cli-app'" in every and "alice" not in every
    pair = ok(strom("configs", "--bootstrap-server", b, "--describe", "--user", "alice", "--client", "cli-app")).stdout
    assert pair.strip() == "Quota configs for user-principal 'alice', client-id 'cli-app' are producer_byte_rate=500.0"
    users = ok(strom("configs", "--bootstrap-server", b, "--describe", "--entity-type", "users")).stdout
    assert users.strip() == "Quota configs for user-principal 'alice' are consumer_byte_rate=1000.0"

    ok(strom("configs", "--bootstrap-server", b, "--alter", "--delete-config", "producer_byte_rate",
             "--entity-type", "clients", "--entity-name", "cli-app"))
    after = ok(strom("configs", "--bootstrap-server", b, "--describe", "--entity-type", "clients",
                     "--entity-name", "cli-app")).stdout
    assert after.strip() == "Quota configs for client-id 'cli-app' are consumer_byte_rate=2097152.0"


def test_configs_quota_errors_are_one_readable_line(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    bad_key = strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "max_bytes=5",
                    "--entity-type", "clients", "--entity-name", "x")
    assert bad_key.returncode == 1 and "Invalid quota config 'max_bytes'" in bad_key.stderr
    fraction = strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "producer_byte_rate=1.5",
                     "--entity-type", "clients", "--entity-name", "x")
    assert fraction.returncode == 1 and "must be a Long value" in fraction.stderr
    no_name = strom("configs", "--bootstrap-server", b, "--alter", "--add-config", "producer_byte_rate=5",
                    "--entity-type", "clients")
    assert no_name.returncode == 1 and "--alter needs --entity-name" in no_name.stderr
    for result in (bad_key, fraction, no_name):
        assert "Traceback" not in result.stderr
