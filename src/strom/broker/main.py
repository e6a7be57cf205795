"""Process entry point for a broker: config, logging, signals, event loop."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

from strom.config import BrokerConfig, ConfigError
from strom.storage.log_dirs import LogDirError


def run(properties_path: str | None, overrides: list[str]) -> None:
    """Start a broker and block until SIGINT/SIGTERM. Exits with status 2 on a bad config."""
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    try:
        config = BrokerConfig.load(properties_path, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    try:
        asyncio.run(_serve(config))
    except (ConfigError, LogDirError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


async def _serve(config: BrokerConfig) -> None:
    from strom.broker.server import KafkaServer

    server = KafkaServer(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_stop)
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
        await server.run_until_stopped()
    finally:
        await server.shutdown()


if __name__ == "__main__":
    argv = sys.argv[1:]
    path = argv[0] if argv and not argv[0].startswith("--") else None
    rest = argv[1:] if path else argv
    ovr = [rest[i + 1] for i, a in enumerate(rest) if a == "--override" and i + 1 < len(rest)]
    run(path, ovr)
