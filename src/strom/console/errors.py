"""The one error type pages show: a readable message and the HTTP status to answer with."""

from __future__ import annotations


class ConsoleError(Exception):
    """An expected failure (bad input, unknown topic, broker refusal): shown as text, never a traceback."""

    def __init__(self, message: str, status: int = 400, title: str = "Error") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.title = title


def bad_request(message: str) -> ConsoleError:
    return ConsoleError(message, 400, "Invalid input")


def not_found(message: str) -> ConsoleError:
    return ConsoleError(message, 404, "Not found")
