"""TLS contexts from the ssl.* keys: versions, cipher suites, client authentication, inline PEM, host checks."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from tests.support.certs import CertificateAuthority

from strom.config import BrokerConfig, ConfigError
from strom.security.ssl_factory import client_context, normalize_pem, server_context


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


def config(ca: CertificateAuthority, **extra: str) -> BrokerConfig:
    broker = ca.issue("broker", "localhost", server=True)
    return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                         "ssl.keystore.location": str(broker.keystore), "ssl.truststore.location": str(ca.ca_file),
                         **extra})


def test_versions_and_client_authentication_per_listener(ca: CertificateAuthority) -> None:
    ctx = server_context(config(ca, **{"listener.name.ssl.ssl.enabled.protocols": "TLSv1.3",
                                       "listener.name.ssl.ssl.client.auth": "requested"}), "SSL")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3 and ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    default = server_context(config(ca), "SSL")
    assert default.minimum_version == ssl.TLSVersion.TLSv1_2 and default.verify_mode == ssl.CERT_NONE


def test_cipher_suites(ca: CertificateAuthority) -> None:
    ctx = server_context(config(ca, **{"ssl.cipher.suites": "ECDHE-ECDSA-AES256-GCM-SHA384"}), "SSL")
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        server_context(config(ca, **{"ssl.cipher.suites": "NOT-A-CIPHER"}), "SSL")


def test_inter_broker_client_checks_the_host_unless_told_not_to(ca: CertificateAuthority) -> None:
    assert client_context(config(ca), "SSL").check_hostname
    off = client_context(config(ca, **{"ssl.endpoint.identification.algorithm": ""}), "SSL")
    assert not off.check_hostname and off.verify_mode == ssl.CERT_REQUIRED


def test_pem_text_joined_into_one_line_is_rebuilt(ca: CertificateAuthority) -> None:
    text = Path(ca.ca_file).read_text()
    assert normalize_pem(text.replace("\n", " ")) == text
    assert normalize_pem(text.replace("\n", "\\n")) == text
    with pytest.raises(ValueError):
        normalize_pem("no certificate here")
