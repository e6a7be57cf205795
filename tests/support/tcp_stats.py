"""How many bytes a process has sent over its TCP connections, from the kernel's tcp_info (``ss``)."""

from __future__ import annotations

import re
import subprocess


def bytes_sent(pid: int, port: int) -> int:
    """Bytes the process's established TCP connections to 127.0.0.1:port have sent."""
    out = subprocess.run(["ss", "-tinpH", "state", "established", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    total, ours = 0, False
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            ours = f"pid={pid}," in line
            continue
        m = re.search(r"bytes_sent:(\d+)", line)
        if ours and m:
            total += int(m.group(1))
    return total
