"""TLS contexts from Kafka's ssl.* keys (per listener: listener.name.<l>.ssl.*), PEM only, with Python's ssl.

Server side (SSL and SASL_SSL listeners): the key store is `ssl.keystore.location` (one PEM file with the private
key and the certificate chain) or `ssl.keystore.key` + `ssl.keystore.certificate.chain` (PEM text), the key
possibly encrypted with `ssl.key.password`; `ssl.client.auth` asks clients for a certificate, verified against
`ssl.truststore.location` / `ssl.truststore.certificates`. Client side (a broker reaching another on a TLS
inter-broker listener) trusts the same trust store and presents the same key store.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any

from strom.config import BrokerConfig, ConfigError

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def normalize_pem(text: str) -> str:
    """PEM text as a properties file may hold it (lines joined by `\\` continuations, or `\\n`): each block
    rebuilt with its base64 in lines of 64, which is what OpenSSL reads."""
    blocks = []
    for kind, body in _PEM_BLOCK.findall(text):
        data = re.sub(r"\\n|\s", "", body)
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"]))
    if not blocks:
        raise ValueError("no PEM block (-----BEGIN ...-----) found")
    return "\n".join(blocks) + "\n"


def _key(listener: str, key: str) -> str:
    return f"listener.name.{listener.lower()}.{key} (or {key})"


def _get(cfg: BrokerConfig, listener: str, key: str) -> Any:
    return cfg.listener_config(listener, key)


def _protocols(ctx: ssl.SSLContext, cfg: BrokerConfig, listener: str) -> None:
    enabled = sorted(_VERSIONS[v] for v in _get(cfg, listener, "ssl.enabled.protocols"))
    if not enabled:
        raise ConfigError(f"{_key(listener, 'ssl.enabled.protocols')} is empty: enable TLSv1.2 and/or TLSv1.3")
    ctx.minimum_version, ctx.maximum_version = enabled[0], enabled[-1]
    ciphers = _get(cfg, listener, "ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(ciphers))
        except ssl.SSLError:
            raise ConfigError(f"{_key(listener, 'ssl.cipher.suites')}: none of {','.join(ciphers)} is a cipher "
                              "suite OpenSSL knows") from None


def _load_key_store(ctx: ssl.SSLContext, cfg: BrokerConfig, listener: str, required: bool) -> None:
    location = _get(cfg, listener, "ssl.keystore.location")
    chain = _get(cfg, listener, "ssl.keystore.certificate.chain")
    key = _get(cfg, listener, "ssl.keystore.key")
    password = _get(cfg, listener, "ssl.key.password")
    if location and (chain or key):
        raise ConfigError(f"listener {listener}: set either ssl.keystore.location or ssl.keystore.key and "
                          "ssl.keystore.certificate.chain, not both")
    if not location and not (chain and key):
        if required:
            raise ConfigError(f"listener {listener} uses TLS but has no key store: set "
                              f"{_key(listener, 'ssl.keystore.location')} to a PEM file with the private key and "
                              "certificate chain, or ssl.keystore.key and ssl.keystore.certificate.chain")
        if chain or key:
            raise ConfigError(f"listener {listener}: ssl.keystore.key and ssl.keystore.certificate.chain go together")
        return
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        else:
            # ssl reads PEM from files only: a private file, gone as soon as it is loaded.
            with tempfile.TemporaryDirectory(prefix="strom-ssl-") as tmp:
                path = os.path.join(tmp, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(normalize_pem(key) + normalize_pem(chain))
                ctx.load_cert_chain(path, password=password)
    except FileNotFoundError:
        raise ConfigError(f"{_key(listener, 'ssl.keystore.location')}: {location} does not exist") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the key store (a wrong ssl.key.password, a key that "
                          f"does not match the certificate, or not PEM: {exc})") from None


def _load_trust_store(ctx: ssl.SSLContext, cfg: BrokerConfig, listener: str, purpose: ssl.Purpose) -> bool:
    """True when a trust store is configured; otherwise the system's CAs are trusted."""
    location = _get(cfg, listener, "ssl.truststore.location")
    certificates = _get(cfg, listener, "ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        if certificates:
            ctx.load_verify_locations(cadata=normalize_pem(certificates))
    except FileNotFoundError:
        raise ConfigError(f"{_key(listener, 'ssl.truststore.location')}: {location} does not exist") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the trust store ({exc})") from None
    if not location and not certificates:
        ctx.load_default_certs(purpose)
        return False
    return True


def server_context(cfg: BrokerConfig, listener: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, cfg, listener)
    _load_key_store(ctx, cfg, listener, required=True)
    mode = _VERIFY_MODES[_get(cfg, listener, "ssl.client.auth")]
    if mode != ssl.CERT_NONE:
        _load_trust_store(ctx, cfg, listener, ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = mode
    return ctx


def client_context(cfg: BrokerConfig, listener: str) -> ssl.SSLContext:
    """How this broker connects to another broker's TLS listener `listener`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, cfg, listener)
    ctx.check_hostname = (_get(cfg, listener, "ssl.endpoint.identification.algorithm") or "").lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_trust_store(ctx, cfg, listener, ssl.Purpose.SERVER_AUTH)
    _load_key_store(ctx, cfg, listener, required=False)
    return ctx
