"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka implements them.

A credential is what a broker keeps for a user: salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")),
ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count; never the password. Kafka stores it in
the user's entity config as `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>` under the
mechanism's name.

`ScramServer` runs the broker's side of one exchange; `ScramClient` the client's (brokers use it on a SCRAM
inter-broker listener). Like Kafka, the password is taken as UTF-8 bytes (no SASLprep) and extensions in the
client's first message are ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from strom.security.sasl import AuthenticationFailed

# Kafka's ScramMechanism: name -> (hash, id on the wire of the SCRAM credential APIs, minimum iterations).
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_ID = {wire_id: name for name, (_, wire_id) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
_FAKE_SALT_KEY = secrets.token_bytes(32)  # per process: unknown users get a stable, meaningless salt


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise AuthenticationFailed(f"Invalid SCRAM {what}") from None


@dataclass(frozen=True, slots=True)
class ScramFormatter:
    """The SCRAM functions for one hash (Kafka's ScramFormatter)."""

    hash_name: str

    @classmethod
    def for_mechanism(cls, mechanism: str) -> ScramFormatter:
        return cls(MECHANISMS[mechanism][0])

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC and one block."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.h(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")

    def credential_from_salted(self, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
        return ScramCredential(salt, self.stored_key(self.client_key(salted_password)),
                               self.server_key(salted_password), iterations)

    def credential(self, password: str, iterations: int = DEFAULT_ITERATIONS,
                   salt: bytes | None = None) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        return self.credential_from_salted(salt, self.salted_password(password, salt, iterations), iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's persisted form (ScramCredentialUtils.credentialToString)."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"invalid SCRAM credential ({type(exc).__name__})") from None

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed("Invalid SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _decode_saslname(name: str) -> str:
    """RFC 5802 saslname: ',' travels as '=2C' and '=' as '=3D'; any other '=' is invalid."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("Invalid SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _decode_utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None


CredentialLookup = Callable[[str, str], ScramCredential | None]
"""(user name, mechanism) -> the user's credential for that mechanism, None when there is none."""


class ScramServer:
    """The broker's side of one SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, server_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.formatter = ScramFormatter.for_mechanism(mechanism)
        self._lookup = lookup
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self._state = 0
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == 2

    def evaluate(self, token: bytes) -> bytes:
        if self._state == 0:
            return self._client_first(_decode_utf8(token))
        if self._state == 1:
            return self._client_final(_decode_utf8(token))
        raise AuthenticationFailed("SCRAM exchange already complete")

    def _client_first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) == 3 and parts[0].startswith("p="):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthenticationFailed("Invalid SCRAM client first message")
        authzid = parts[1]
        bare = parts[2]
        # n=<user>,r=<nonce>[,<extensions>]: Kafka's extensions (tokenauth=true, ...) are ignored
        attrs = _attributes(",".join(bare.split(",", 2)[:2]))
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("Invalid SCRAM client first message")
        if attrs[0][1] == "" or any(k == "m" for k, _ in attrs):
            raise AuthenticationFailed("Invalid SCRAM client first message")
        username = _decode_saslname(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _decode_saslname(authzid[2:]) != username):
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        client_nonce = attrs[1][1]
        if any(c in client_nonce for c in ",") or not client_nonce.isprintable():
            raise AuthenticationFailed("Invalid SCRAM client nonce")
        self.username = username
        credential = self._lookup(username, self.mechanism)
        self._known = credential is not None
        if credential is None:
            # Answer as for a real user, with a salt derived from the name, and fail at the proof, so the
            # answer does not tell which user names exist.
            salt = hmac.new(_FAKE_SALT_KEY, username.encode("utf-8"), "sha256").digest()
            credential = ScramCredential(salt, b"\0" * len(self.formatter.h(b"")), b"", DEFAULT_ITERATIONS)
        self._credential = credential
        self._gs2_header = f"{parts[0]},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = 1
        return self._server_first.encode("ascii")

    def _client_final(self, message: str) -> bytes:
        attrs = _attributes(message)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise AuthenticationFailed("Invalid SCRAM client final message")
        channel_binding = _unb64(attrs[0][1], "channel binding")
        if channel_binding != self._gs2_header.encode("utf-8"):
            raise AuthenticationFailed("Invalid SCRAM channel binding")
        # The nonce must be the one of server-first; like Kafka (since 3.8.1) a longer one ending with it is
        # accepted too, because librdkafka before 2.6.1 (kcat 1.7 among others) puts its client nonce in front
        # once more. The server's part is in it either way, so an old exchange still cannot be replayed.
        if not attrs[1][1].endswith(self._nonce):
            raise AuthenticationFailed("Invalid SCRAM nonce")
        proof = _unb64(attrs[-1][1], "client proof")
        without_proof = message[: message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        assert credential is not None
        f = self.formatter
        signature = f.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Invalid SCRAM client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not self._known or not hmac.compare_digest(f.h(client_key), credential.stored_key):
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")
        self._state = 2
        return f"v={_b64(f.hmac(credential.server_key, auth_message))}".encode("ascii")


class ScramClient:
    """The client's side: first() -> final(server_first) -> verify(server_final)."""

    def __init__(self, mechanism: str, username: str, password: str, client_nonce: str | None = None) -> None:
        self.formatter = ScramFormatter.for_mechanism(mechanism)
        self._password = password
        self._nonce = client_nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_encode_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _decode_utf8(server_first)
        attrs = dict(_attributes(text))
        if "e" in attrs:
            raise AuthenticationFailed(f"SCRAM server error: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", ""), "salt"), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("Invalid SCRAM server nonce")
        if iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(f"SCRAM iterations {iterations} below the minimum {MIN_ITERATIONS}")
        f = self.formatter
        salted = f.salted_password(self._password, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = f.client_key(salted)
        signature = f.hmac(f.stored_key(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = f.hmac(f.server_key(salted), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(_decode_utf8(server_final)))
        if "e" in attrs:
            raise AuthenticationFailed(f"SCRAM server error: {attrs['e']}")
        if not hmac.compare_digest(_unb64(attrs.get("v", ""), "server signature"), self._server_signature):
            raise AuthenticationFailed("Invalid SCRAM server signature")
