"""Browser sessions kept on the server: the cookie holds only a random id, never credentials.

Each session has a CSRF token that every form and fetch() sends back, and, after a SASL
login, the credentials its Kafka clients use. Idle sessions expire.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

COOKIE_NAME = "strom_console"
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-256"
    security_protocol: str = "SASL_PLAINTEXT"

    def client_settings(self) -> dict[str, str]:
        """librdkafka settings that log in with these credentials."""
        return {"security.protocol": self.security_protocol, "sasl.mechanism": self.mechanism,
                "sasl.username": self.username, "sasl.password": self.password}


@dataclass
class ConsoleSession:
    id: str
    csrf: str
    credentials: Credentials | None = None
    last_seen: float = field(default_factory=time.monotonic)
    flashes: list[tuple[str, str]] = field(default_factory=list)
    gateway: Any = None  # the Kafka clients of a logged-in session (closed on logout/expiry)

    def flash(self, message: str, level: str = "ok") -> None:
        self.flashes.append((level, message))

    def take_flashes(self) -> list[tuple[str, str]]:
        taken, self.flashes = self.flashes, []
        return taken

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf, token or "")


class SessionStore:
    """Sessions by id; at most `max_sessions`, each dropped after `idle_seconds` without a request."""

    def __init__(self, idle_seconds: float = 8 * 3600, max_sessions: int = 1000) -> None:
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._sessions: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def get(self, session_id: str | None) -> ConsoleSession | None:
        now = time.monotonic()
        with self._lock:
            session = self._sessions.get(session_id or "")
            if session is None:
                return None
            if now - session.last_seen > self.idle_seconds:
                self._drop(session.id)
                return None
            session.last_seen = now
            return session

    def create(self, credentials: Credentials | None = None) -> ConsoleSession:
        session = ConsoleSession(secrets.token_urlsafe(32), secrets.token_urlsafe(32), credentials)
        with self._lock:
            self._expire(time.monotonic())
            if len(self._sessions) >= self.max_sessions:
                oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
                self._drop(oldest.id)
            self._sessions[session.id] = session
        return session

    def replace(self, old: ConsoleSession, credentials: Credentials | None, gateway: Any = None) -> ConsoleSession:
        """A fresh id at login and logout, so an id seen before cannot ride on the new identity."""
        with self._lock:
            self._drop(old.id)
        new = self.create(credentials)
        new.gateway = gateway
        new.flashes = old.flashes
        return new

    def __len__(self) -> int:
        return len(self._sessions)

    def close(self) -> None:
        with self._lock:
            for session_id in list(self._sessions):
                self._drop(session_id)

    def _expire(self, now: float) -> None:
        for session in [s for s in self._sessions.values() if now - s.last_seen > self.idle_seconds]:
            self._drop(session.id)

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and session.gateway is not None:
            # Closing flushes a producer (up to a second): never on the caller's (the event loop's) time.
            threading.Thread(target=session.gateway.close, name="console-logout", daemon=True).start()
            session.gateway = None
