"""`strom leader-election`: preferred or unclean leader election (like kafka-leader-election.sh)."""

from __future__ import annotations

from typing import Annotated

import typer

from strom.cli.common import BootstrapOption, CommandConfigOption, admin_client, cli_errors, fail, write_out


def leader_election(
    bootstrap_server: BootstrapOption = "127.0.0.1:9092",
    election_type: Annotated[str, typer.Option("--election-type", help="preferred or unclean.")] = "preferred",
    topic: Annotated[str | None, typer.Option("--topic", help="Topic whose partition(s) to elect.")] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="One partition of --topic.")] = None,
    all_topic_partitions: Annotated[
        bool, typer.Option("--all-topic-partitions", help="Every partition in the cluster.")] = False,
    command_config: CommandConfigOption = None,
) -> None:
    """Elect leaders: back to the preferred (first) replica, or unclean for offline partitions."""
    from confluent_kafka import ElectionType, TopicPartition

    kinds = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}
    if election_type.lower() not in kinds:
        fail(f"Invalid --election-type '{election_type}': use preferred or unclean.")
    if all_topic_partitions == (topic is not None):
        fail("Give exactly one of --topic or --all-topic-partitions.")
    with cli_errors():
        admin = admin_client(bootstrap_server, command_config)
        partitions = None
        if topic is not None:
            if partition is not None:
                partitions = [TopicPartition(topic, partition)]
            else:
                meta = admin.list_topics(topic, timeout=10).topics.get(topic)
                if meta is None or meta.error is not None:
                    fail(f"Topic '{topic}' does not exist.")
                partitions = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        results = admin.elect_leaders(kinds[election_type.lower()], partitions).result()
        done, skipped, failed = [], [], []
        for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            name = f"{tp.topic}-{tp.partition}"
            if err is None:
                done.append(name)
            elif "ELECTION_NOT_NEEDED" in str(err) or "not needed" in str(err).lower():
                skipped.append(name)
            else:
                failed.append(f"{name}: {err}")
        if done:
            write_out(f"Successfully completed leader election ({election_type}) for partitions {', '.join(done)}\n")
        if skipped:
            write_out(f"Valid replica already elected for partitions {', '.join(skipped)}\n")
        if failed:
            write_out("Error completing leader election for partitions:\n" + "\n".join(failed) + "\n")
            raise typer.Exit(1)
