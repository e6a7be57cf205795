"""Spark tasks and the broker's own client sit below the server: importing them loads no server package.

A Spark executor imports strom.spark (and through it strom.client); pulling in the broker, storage,
the controller, ZooKeeper's client or the console's web framework there would cost start-up time and
memory on every executor, and would couple the client side to server internals.
"""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = ("strom.broker", "strom.storage", "strom.controller", "strom.metadata", "strom.replication",
               "strom.coordinator", "strom.console", "kazoo", "starlette")


def test_spark_and_the_client_import_no_server_package() -> None:
    probe = (
        "import importlib, json, pkgutil, sys\n"
        "import strom.client.broker_client, strom.spark\n"
        "for m in pkgutil.iter_modules(strom.spark.__path__):\n"
        "    importlib.import_module('strom.spark.' + m.name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    offending = [m for m in loaded if m.startswith(SERVER_SIDE)]
    assert not offending, f"Spark-side imports load server packages: {offending[:10]}"
