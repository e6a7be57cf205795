"""`strom` tools on the details a user meets first: one error line per failure, one convention for
prefixes and exit codes, configs with their synonyms, index checks of the active segment."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.test_cli import ok, strom


def test_describe_unknown_group_is_one_error_and_non_zero(broker) -> None:
    for extra in ((), ("--members",), ("--state",)):
        result = strom("consumer-groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", "ghost",
                       *extra)
        assert result.returncode == 1, (extra, result.stdout, result.stderr)
        assert result.stderr.strip() == "Error: Consumer group 'ghost' does not exist.", (extra, result.stderr)
        assert "no active members" not in result.stdout + result.stderr


def test_errors_share_one_prefix_and_exit_codes(broker, tmp_path: Path) -> None:
    """`Error: ...` on stderr everywhere; 2 for a wrong command line or configuration, 1 for a failed operation."""
    usage = strom("topics", "--bogus")
    config = strom("server", "start", "--override", "no.such.broker.setting=1",
                   "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    failed = strom("topics", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "no-such-topic")
    assert (usage.returncode, config.returncode, failed.returncode) == (2, 2, 1), (usage, config, failed)
    for result in (usage, config, failed):
        lines = [line for line in result.stderr.splitlines() if line.startswith(("Error", "error"))]
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
        assert "Traceback" not in result.stderr


def test_configs_describe_shows_the_topic_synonym(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-synonyms", "--partitions", "1"))
    ok(strom("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cli-synonyms",
             "--alter", "--add-config", "min.insync.replicas=2"))
    described = ok(strom("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name",
                         "cli-synonyms", "--describe")).stdout
    line = next(line for line in described.splitlines() if line.startswith("  min.insync.replicas="))
    assert re.fullmatch(r"  min\.insync\.replicas=2 sensitive=false synonyms=\{DYNAMIC_TOPIC_CONFIG:"
                        r"min\.insync\.replicas=2, DEFAULT_CONFIG:min\.insync\.replicas=1\}", line), line
    bad = strom("configs", "--bootstrap-server", b, "--topic", "cli-synonyms", "--alter", "--add-config",
                "retention.ms=soon")
    assert bad.returncode == 1 and bad.stderr.startswith("Error: Invalid config: "), bad.stderr
    assert len(bad.stderr.splitlines()) == 1 and "retention.ms" in bad.stderr, bad.stderr
    everything = ok(strom("configs", "--bootstrap-server", b, "--topic", "cli-synonyms", "--describe", "--all")).stdout
    assert line in everything.splitlines()
    brokers = ok(strom("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--describe", "--all")).stdout
    assert re.search(r"^  log\.retention\.ms=\S+ sensitive=false synonyms=\{.*DEFAULT_CONFIG:log\.retention\.hours=168",
                     brokers, re.M), brokers


def test_index_sanity_check_of_the_active_segment_explains(broker) -> None:
    b = broker.bootstrap
    ok(strom("topics", "--bootstrap-server", b, "--create", "--topic", "cli-active", "--partitions", "1"))
    ok(strom("console-producer", "--bootstrap-server", b, "--topic", "cli-active", "--sync", stdin="one\ntwo\n"))
    segment = Path(broker.data_dir) / "cli-active-0" / "00000000000000000000.log"
    index = segment.with_suffix(".index")
    assert segment.exists() and not index.exists()  # the broker writes it when the segment rolls or it stops
    check = ok(strom("dump-log", "--files", str(index), "--index-sanity-check"))
    assert "does not exist" not in check.stdout + check.stderr
    assert f"{index} is not written yet: 00000000000000000000.log is the partition's active segment" in check.stdout
