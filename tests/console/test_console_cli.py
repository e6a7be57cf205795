"""`strom console` as a user starts it: refusals are one readable line, the URL is printed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

from tests.support.console import ConsoleProcess


def strom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def test_busy_port_and_bad_metrics_url_are_one_line_errors(broker) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = strom("console", "--bootstrap-server", broker.bootstrap, "--port", str(port))
    assert taken.returncode == 1
    assert f"Cannot listen on 127.0.0.1:{port}" in taken.stderr and "Traceback" not in taken.stderr
    bad = strom("console", "--bootstrap-server", broker.bootstrap, "--metrics-url", "ftp://x")
    assert bad.returncode == 1 and "Invalid --metrics-url 'ftp://x'" in bad.stderr


def test_console_prints_its_url_and_serves(broker, tmp_path) -> None:
    with ConsoleProcess(broker.bootstrap, tmp_path) as console:
        rebound = urllib.request.Request(console.url + "/topics", headers={"Host": f"attacker.test:{console.port}"})
        try:
            urllib.request.urlopen(rebound, timeout=10)
            raise AssertionError("a foreign Host name was served")
        except urllib.error.HTTPError as refused:
            assert refused.code == 400 and b"Unknown host name" in refused.read()
        for name in ("localhost", "127.0.0.1"):
            request = urllib.request.Request(console.url + "/healthz", headers={"Host": f"{name}:{console.port}"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
        with urllib.request.urlopen(console.url + "/healthz", timeout=10) as answer:
            assert answer.read() == b"ok\n"
        with urllib.request.urlopen(console.url + "/static/console.css", timeout=10) as answer:
            assert answer.headers["content-type"].startswith("text/css")
    assert f"Strom console on http://127.0.0.1:{console.port}/ (brokers {broker.bootstrap})" in console.log_tail()
