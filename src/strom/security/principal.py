"""KafkaPrincipal: who a connection is, as ACLs and quotas name it ("User:alice")."""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may itself contain colons."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"invalid principal {text!r}: expected Type:name, e.g. User:alice")
        return cls(principal_type, name)


# Kafka's principal for a connection that did not authenticate (PLAINTEXT, or SSL without a client certificate).
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
