"""Process entry point for a broker: config, logging, signals, event loop."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import sys

from strom.config import BrokerConfig, ConfigError
from strom.storage.log_dirs import LogDirError

# Descriptors kept for client connections, listeners and the metadata store on top of one per segment.
FD_MARGIN = 128


def run(properties_path: str | None, overrides: list[str]) -> None:
    """Start a broker and block until SIGINT/SIGTERM. Exits with status 2 on a bad config."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(properties_path, overrides)
    except ConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    try:
        ensure_open_files_limit(config.log_dirs())
        asyncio.run(_serve(config))
    except (ConfigError, LogDirError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def count_segments(log_dirs: list[str]) -> int:
    """Segment files (`*.log`) under the log directories; each stays open while the broker runs."""
    count = 0
    for log_dir in log_dirs:
        for _root, _dirs, files in os.walk(log_dir):
            count += sum(1 for f in files if f.endswith(".log"))
    return count


def ensure_open_files_limit(log_dirs: list[str]) -> None:
    """Raise the soft descriptor limit to the hard one; refuse to start if even that cannot hold the logs.

    Failing here with the `ulimit -n` to use beats dying half-way through log loading with EMFILE.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # some systems cap the soft limit below an unlimited hard one: keep what we have
    if soft == resource.RLIM_INFINITY:
        return
    needed = count_segments(log_dirs) + FD_MARGIN
    if soft < needed:
        raise ConfigError(f"the open files limit is {soft} but this broker needs at least {needed} "
                          f"({needed - FD_MARGIN} log segments + {FD_MARGIN} for connections); "
                          f"run `ulimit -n {needed}` or higher (raising the hard limit needs root) "
                          "and start again")


async def _serve(config: BrokerConfig) -> None:
    from strom.broker.server import KafkaServer

    server = KafkaServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
    loop.add_signal_handler(signal.SIGHUP, server.request_log_dir_recovery)  # KIP-112 dirs back online
    try:
        await server.startup()
        # Long-lived start-up objects (codec classes, metadata) never need scanning again, and
        # a larger young generation makes collections rarer: both trim latency spikes.
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        host, _ = config.advertised_host_port()
        bootstrap = f"{host}:{server.port}"
        print(f"Strom broker {config.get('broker.id')} listening on {bootstrap} "
              f"(data in {', '.join(config.log_dirs())})\n"
              f"  create a topic:  strom topics --bootstrap-server {bootstrap} --create --topic demo --partitions 3\n"
              f"  produce:         strom console-producer --bootstrap-server {bootstrap} --topic demo\n"
              f"  consume:         strom console-consumer --bootstrap-server {bootstrap} --topic demo --from-beginning\n"
              f"  stop:            Ctrl-C", flush=True)
        if server.metrics_endpoint is not None:
            url = server.metrics_endpoint.url
            print(f"  metrics:         {url}/metrics  (health: {url}/healthz, readiness: {url}/readyz)", flush=True)
        await server.run_until_stopped()
    finally:
        await server.shutdown()


if __name__ == "__main__":
    argv = sys.argv[1:]
    path = argv[0] if argv and not argv[0].startswith("--") else None
    rest = argv[1:] if path else argv
    ovr = [rest[i + 1] for i, a in enumerate(rest) if a == "--override" and i + 1 < len(rest)]
    run(path, ovr)
