"""`strom reassign-partitions --command-config`: the tool logs in over SASL like every other client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_sasl import PLAIN_JAAS
from tests.support.broker import BrokerProcess
from tests.support.security import start_sasl_broker


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_sasl_broker(tmp_path_factory.mktemp("reassign-sasl"), PLAIN_JAAS)
    try:
        yield broker
    finally:
        broker.close()


def reassign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "reassign-partitions", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_tool_logs_in_with_command_config(sasl_broker: BrokerProcess, tmp_path: Path) -> None:
    sasl = f"127.0.0.1:{sasl_broker.sasl_port}"  # type: ignore[attr-defined]
    props = tmp_path / "alice.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     "username=\"alice\" password=\"alice-secret\";\n")
    created = subprocess.run([sys.executable, "-m", "strom.cli.main", "topics", "--bootstrap-server", sasl,
                              "--command-config", str(props), "--create", "--topic", "sasl-moves"],
                             capture_output=True, text=True, timeout=120)
    assert created.returncode == 0, created.stderr
    listed = reassign("--bootstrap-server", sasl, "--command-config", str(props), "--list")
    assert listed.returncode == 0 and listed.stdout == "No partition reassignments found.\n", listed
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "sasl-moves"}]}))
    generated = reassign("--bootstrap-server", sasl, "--command-config", str(props), "--generate",
                         "--topics-to-move-json-file", str(topics), "--broker-list", "0")
    assert generated.returncode == 0, generated.stderr
    assert '{"topic":"sasl-moves","partition":0,"replicas":[0],"log_dirs":["any"]}' in generated.stdout

    props.write_text(props.read_text().replace("alice-secret", "wrong"))
    refused = reassign("--bootstrap-server", sasl, "--command-config", str(props), "--list")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused
    assert refused.stderr.startswith("Error: ") and "authentication" in refused.stderr.lower(), refused.stderr
