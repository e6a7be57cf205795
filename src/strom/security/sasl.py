"""SASL mechanisms: the broker's side of PLAIN, the per-listener settings, and the client side brokers use.

The per-connection state machine (handshake, exchange, re-authentication) is
`strom.security.authenticator.SaslServerAuthenticator`; the mechanisms here only turn tokens into answers.
"""

from __future__ import annotations

import hmac
from typing import Protocol

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


class AuthenticationFailed(Exception):
    """The client failed to authenticate; the message goes back to it (never with a password in it)."""


class SaslServer(Protocol):
    """One exchange of one mechanism, server side."""

    mechanism: str
    username: str | None

    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's token; raises AuthenticationFailed."""
        ...


class PlainServer:
    """RFC 4616: one message `authzid NUL authcid NUL passwd`, checked against `user_<name>` JAAS options."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self._complete = False

    @property
    def complete(self) -> bool:
        return self._complete

    def evaluate(self, token: bytes) -> bytes:
        if self._complete:
            raise AuthenticationFailed("PLAIN exchange already complete")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        expected = self._users.get(username)
        # Compare even for unknown users, so timing does not tell which names exist.
        ok = hmac.compare_digest((expected or "\0").encode("utf-8"), password.encode("utf-8"))
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.username = username
        self._complete = True
        return b""


def plain_client_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")
