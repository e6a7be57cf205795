"""Components stop in the reverse order they started, each exactly once, every one even if another failed.

The broker registers a stop step the moment a component exists, so a start-up that fails half way
stops exactly what it started, and the shutdown order follows from the start order instead of
being written out a second time (and guarded with "was this ever created?" checks).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Lifecycle:
    """A stack of named stop steps (plain or async callables)."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], object]]] = []

    def on_stop(self, name: str, step: Callable[[], object]) -> None:
        """Run ``step`` at stop, before every step registered earlier."""
        self._steps.append((name, step))

    @property
    def pending(self) -> list[str]:
        """The steps a stop would run, in the order it would run them."""
        return [name for name, _ in reversed(self._steps)]

    async def stop(self) -> bool:
        """Run every step, last registered first; a failing step is logged and the next one runs
        (a full disk must not abort a shutdown half way). Returns whether all succeeded."""
        ok = True
        while self._steps:
            name, step = self._steps.pop()
            try:
                result = step()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                ok = False
                log.exception("shutdown step %s failed; continuing", name)
        return ok
