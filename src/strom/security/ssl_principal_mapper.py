"""Client certificate -> principal name (Kafka's SslPrincipalMapper and `ssl.principal.mapping.rules`).

The distinguished name is written as Java's X500Principal.getName() writes it (RFC 2253: most specific
attribute first, `CN=alice,OU=Engineering,O=Example,C=DE`). Rules are tried in order:
`RULE:pattern/replacement/[LU]` applies when the pattern matches the whole name, and the replacement (`$1` for a
group, as in Java) becomes the user name, lower- or upper-cased with L or U; `DEFAULT` keeps the name as it is.
When no rule applies the client cannot be given a principal and its connection is closed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Python's names for the attributes of a certificate subject -> RFC 2253's keywords (X500Principal output).
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID", "emailAddress": "EMAILADDRESS"}
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules applies to a distinguished name."""


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peercert: dict[str, Any]) -> str:
    """RFC 2253 form of `SSLSocket.getpeercert()`'s subject (a tuple of RDNs, least specific first)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        name = _java_expand(m, self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _java_expand(m: re.Match[str], replacement: str) -> str:
    """Java's Matcher replacement syntax: `$n` is a group, a backslash escapes the next character."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            # as Java: the first digit names a group; more digits extend it while such a group exists
            group, j = int(replacement[i + 1]), i + 2
            if group > m.re.groups:
                raise ValueError(f"no group {group} in {m.re.pattern}")
            while j < len(replacement) and replacement[j].isdigit() and int(replacement[i + 1 : j + 1]) <= m.re.groups:
                group, j = int(replacement[i + 1 : j + 1]), j + 1
            out.append(m.group(group) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules_text = rules
        self._rules = self._parse(rules)

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules: list[_Rule] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"invalid rule in ssl.principal.mapping.rules at '{text[pos:pos + 40]}': expected "
                                 "RULE:pattern/replacement/[LU] or DEFAULT")
            pos = m.end()
            if m.group(1):
                rules.append(_Rule(True))
                continue
            try:
                pattern = re.compile(m.group(2))
            except re.error as exc:
                raise ValueError(f"invalid pattern {m.group(2)!r} in ssl.principal.mapping.rules: {exc}") from None
            rules.append(_Rule(False, pattern, m.group(3), m.group(4)))
        if not rules:
            raise ValueError("ssl.principal.mapping.rules is empty: use DEFAULT")
        return rules

    def name(self, dn: str) -> str:
        for rule in self._rules:
            found = rule.apply(dn)
            if found is not None:
                return found
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.rules_text}")
