"""ssl.principal.mapping.rules as Kafka documents them, and distinguished names written as Java writes them."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest
from tests.support.certs import CertificateAuthority

from strom.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper, distinguished_name

# The examples of Kafka's documentation (security, "Customizing SSL User Name").
KAFKA_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                   "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                   "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
                   "DEFAULT")


@pytest.mark.parametrize(("dn", "name"), [
    ("CN=kafka-server1,OU=ServiceUsers,O=org,C=US", "kafka-server1"),
    ("CN=adminUser,OU=Admin,O=Apache,L=SantaClara,ST=CA,C=US", "adminuser@admin"),
    ("CN=kafka1,O=Apache,L=SantaClara,ST=CA,C=US", "kafka1"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_kafka_documentation_examples(dn: str, name: str) -> None:
    assert SslPrincipalMapper(KAFKA_DOC_RULES).name(dn) == name


def test_upper_case_escapes_and_many_groups() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=([^,]*)\/x,O=(.*)$/$2\$$1/U")
    assert mapper.name("CN=bob/x,O=acme") == "ACME$BOB"


def test_no_matching_rule_names_the_dn() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=eve"):
        SslPrincipalMapper("RULE:^CN=alice$/alice/").name("CN=eve")


@pytest.mark.parametrize("rules", ["", "RULE:abc", "NOPE", "RULE:(/x/", "RULE:a/b/X"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_distinguished_name_of_a_real_client_certificate(tmp_path: Path) -> None:
    """A TLS handshake with client authentication; the peer's subject comes out as Java's RFC 2253 text."""
    ca = CertificateAuthority(tmp_path)
    server_id = ca.issue("server", "localhost", server=True)
    client_id = ca.issue("client", "alice, the \"admin\"", ou="Engineering")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server_id.keystore)
    server_ctx.load_verify_locations(ca.ca_file)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    client_ctx.load_cert_chain(client_id.keystore)
    a, b = socket.socketpair()
    got: dict = {}

    def serve() -> None:
        with server_ctx.wrap_socket(a, server_side=True) as s:
            got["cert"] = s.getpeercert()
            s.recv(1)

    t = threading.Thread(target=serve)
    t.start()
    with client_ctx.wrap_socket(b, server_hostname="localhost") as c:
        c.sendall(b"x")
        t.join(10)
    assert distinguished_name(got["cert"]) == client_id.subject
    assert client_id.subject == 'CN=alice\\, the \\"admin\\",OU=Engineering,O=Strom Test,C=DE'
