"""JAAS configuration text as Kafka reads it from `sasl.jaas.config`.

`org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="s" user_alice="a";`
is one login module with a control flag and options. Kafka's PlainLoginModule reads `username`/`password` as the
identity this process uses as a client (brokers on the inter-broker listener) and `user_<name>` as the users a
broker accepts; ScramLoginModule reads `username`/`password` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    """`sasl.jaas.config` text that cannot be read; the message says where."""


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """`user_<name>="<password>"` options: the users a PLAIN server accepts."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}

    def __repr__(self) -> str:  # never show passwords in logs or tracebacks
        return f"JaasConfig({self.login_module!r}, {self.control_flag!r}, options={sorted(self.options)!r})"


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasConfigError(f"unexpected character at offset {pos} of sasl.jaas.config")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            out.append(("word", m.group(2)))
        elif m.group(3):
            out.append(("=", "="))
        elif m.group(4):
            out.append((";", ";"))
    return out


def parse_jaas_config(text: str) -> JaasConfig:
    """Exactly one login module, ending with ';' as Kafka requires."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasConfigError("sasl.jaas.config must read '<LoginModule class> <flag> key=\"value\" ... ;'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise JaasConfigError(f"sasl.jaas.config: control flag must be one of {', '.join(_FLAGS)}, got {flag!r}")
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" or \
                tokens[i + 2][0] not in ("str", "word"):
            raise JaasConfigError("sasl.jaas.config: options must read key=\"value\"")
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
    if i >= len(tokens):
        raise JaasConfigError("sasl.jaas.config must end with ';'")
    if i != len(tokens) - 1:
        raise JaasConfigError("sasl.jaas.config must hold exactly one login module")
    return JaasConfig(module, flag, options)
