"""Java-properties text as java.util.Properties reads it (``server.properties``, client property files)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Join backslash-continued lines like java.util.Properties; yields (line number, line)."""
    pending: str | None = None
    start = 0
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip(" \t\f")
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            start, pending = no, ""
        pending += stripped
        trailing = len(pending) - len(pending.rstrip("\\"))
        if trailing % 2 == 1:  # odd backslashes: the line continues
            pending = pending[:-1]
            continue
        yield start, pending
        pending = None
    if pending:
        yield start, pending


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text into key → value (later keys win, as in Java)."""
    props: dict[str, str] = {}
    for _, line in _logical_lines(text):
        n, i = len(line), 0
        while i < n and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, j = line[:i], i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
        while j < n and line[j] in " \t\f":
            j += 1
        props[_unescape(key)] = _unescape(line[j:]).rstrip()
    return props
