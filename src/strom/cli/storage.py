"""`strom storage`: offline tools for a broker's log dirs (like kafka-storage.sh).

`recover-metadata` rebuilds the embedded store's topic metadata from the partition
directories after ``__cluster_metadata.json`` was lost or had to be moved aside; the broker
refuses to start in that state and prints the exact command to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from strom.cli.common import PLAIN_HELP, cli_errors, fail, print_warning, write_out

storage_app = typer.Typer(help="Inspect and repair a broker's log dirs (broker stopped).", no_args_is_help=True, **PLAIN_HELP)


@storage_app.command("recover-metadata")
def recover_metadata(
    log_dirs: Annotated[
        str | None,
        typer.Option("--log-dirs", help="Comma-separated log dirs of the broker (default: from --config)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="The broker's server.properties (log.dirs, broker.id, offsets topic).",
                     dir_okay=False),
    ] = None,
    broker_id: Annotated[
        int | None,
        typer.Option("--broker-id", help="Broker id (default: meta.properties, then --config, then 0)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be recovered; write nothing.")] = False,
) -> None:
    """Rebuild topic metadata from the partition directories, keeping recorded topic ids."""
    from strom.config import BrokerConfig, ConfigError
    from strom.metadata.recovery import OFFSETS_TOPIC
    from strom.metadata.recovery import recover_metadata as recover
    from strom.storage.log_dirs import LogDirError
    from strom.storage.partition_metadata import encode_topic_id

    with cli_errors():
        try:
            cfg = BrokerConfig.load(str(config) if config else None)
        except ConfigError as exc:
            fail(str(exc))
        if log_dirs is not None:
            dirs = [d.strip() for d in log_dirs.split(",") if d.strip()]
            if not dirs:
                fail("--log-dirs needs at least one directory.")
        elif config is not None:
            dirs = cfg.log_dirs()
        else:
            fail("Give the broker's log dirs with --log-dirs DIR[,DIR] or its properties file with --config.")
        if broker_id is None and config is not None and cfg.is_set("broker.id"):
            broker_id = cfg.get("broker.id")
        internal = {OFFSETS_TOPIC: {"cleanup.policy": "compact",
                                    "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
                                    "compression.type": "producer"}}
        try:
            report = recover(dirs, broker_id, internal, dry_run=dry_run)
        except LogDirError as exc:
            fail(str(exc), exit_code=2)
        for note in report.notes:
            print_warning(note)
        verb = "Would recover" if dry_run else "Recovered"
        for t in report.recovered:
            origin = "recorded id" if t.id_recorded else "new id (none recorded)"
            missing = f"; partitions {t.missing_partitions} had no directory and start empty" \
                if t.missing_partitions else ""
            configs = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items())) or "broker defaults"
            write_out(f"{verb} topic {t.name}: {t.partitions} partition(s), {origin} {encode_topic_id(t.topic_id)}, "
                      f"configs {configs}{missing}\n")
        if report.already_known:
            write_out(f"Already in the metadata: {', '.join(report.already_known)}\n")
        if not report.recovered:
            write_out(f"Nothing to recover: every partition directory is in {report.metadata_file}.\n")
        elif not dry_run:
            write_out(f"Wrote {report.metadata_file} (cluster id {report.cluster_id}).\n")
