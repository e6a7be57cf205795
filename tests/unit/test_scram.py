"""SCRAM math and exchanges: RFC 7677's SCRAM-SHA-256 example, Kafka's credential format, and the checks a broker
makes on every client message (nonce, channel binding, proof)."""

from __future__ import annotations

import base64

import pytest

from strom.security.sasl import AuthenticationFailed
from strom.security.scram import ScramClient, ScramCredential, ScramFormatter, ScramServer

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return ScramFormatter.for_mechanism("SCRAM-SHA-256").credential("pencil", 4096, SALT)


def rfc_server(credential: ScramCredential | None = None) -> ScramServer:
    cred = credential or rfc_credential()
    return ScramServer("SCRAM-SHA-256", lambda user, mech: cred if user == "user" else None, SERVER_NONCE)


def test_rfc7677_server_side() -> None:
    server = rfc_server()
    assert server.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_client_side() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(AuthenticationFailed, match="server signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_credential_round_trips_through_kafkas_config_text() -> None:
    cred = rfc_credential()
    text = cred.to_config()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(",iterations=4096")
    assert ScramCredential.from_config(text) == cred
    assert "pencil" not in text and "stored_key" not in repr(cred)
    with pytest.raises(ValueError):
        ScramCredential.from_config("salt=???,iterations=x")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree(mechanism: str) -> None:
    cred = ScramFormatter.for_mechanism(mechanism).credential("alice-secret", 8192)
    server = ScramServer(mechanism, lambda user, mech: cred if (user, mech) == ("al,=ice", mechanism) else None)
    client = ScramClient(mechanism, "al,=ice", "alice-secret")
    assert b"n=al=2C=3Dice" in client.first()
    final = client.final(server.evaluate(client.first()))
    client.verify(server.evaluate(final))
    assert server.username == "al,=ice"


def test_wrong_password_and_unknown_user_fail_alike_at_the_proof() -> None:
    cred = ScramFormatter.for_mechanism("SCRAM-SHA-512").credential("right", 4096)
    messages = []
    for user, password in (("alice", "wrong"), ("nobody", "right")):
        server = ScramServer("SCRAM-SHA-512", lambda u, m: cred if u == "alice" else None)
        client = ScramClient("SCRAM-SHA-512", user, password)
        first = server.evaluate(client.first())  # an unknown user still gets a plausible salt
        assert b",s=" in first and first.endswith(b",i=4096")
        with pytest.raises(AuthenticationFailed) as failure:
            server.evaluate(client.final(first))
        messages.append(str(failure.value))
    assert messages[0] == messages[1] and "invalid credentials" in messages[0]


def test_the_fake_salt_of_an_unknown_user_is_stable() -> None:
    def salt() -> bytes:
        server = ScramServer("SCRAM-SHA-256", lambda u, m: None)
        return server.evaluate(b"n,,n=ghost,r=abc").split(b",s=")[1]

    assert salt() == salt()


@pytest.mark.parametrize(("final", "reason"), [
    (CLIENT_FINAL.replace(b"%hvY", b"%hvZ"), "nonce"),
    (CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
    (CLIENT_FINAL[:-8] + b"AAAAAAA=", "invalid credentials"),
    (b"c=biws,r=x", "Invalid SCRAM client final"),
    (b"garbage", "Invalid SCRAM message"),
    (CLIENT_FINAL.replace(b"p=", b"p=!!"), "client proof"),
])
def test_bad_client_final_messages_are_rejected(final: bytes, reason: str) -> None:
    server = rfc_server()
    server.evaluate(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match=reason):
        server.evaluate(final)
    assert not server.complete


@pytest.mark.parametrize(("first", "reason"), [
    (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
    (b"n,a=other,n=user,r=abc", "authorization id"),
    (b"n,,r=abc,n=user", "Invalid SCRAM client first"),
    (b"n,,n=us=er,r=abc", "user name"),
    (b"n,,n=user", "Invalid SCRAM client first"),
    (b"\xff\xfe", "UTF-8"),
    (b"", "Invalid SCRAM client first"),
])
def test_bad_client_first_messages_are_rejected(first: bytes, reason: str) -> None:
    with pytest.raises(AuthenticationFailed, match=reason):
        rfc_server().evaluate(first)


def test_extensions_in_the_first_message_are_ignored() -> None:
    server = rfc_server()
    assert server.evaluate(CLIENT_FIRST + b",tokenauth=true") == SERVER_FIRST


def test_the_nonce_old_librdkafka_sends_is_accepted_as_kafka_does() -> None:
    """librdkafka < 2.6.1 repeats its client nonce in front of the combined one; Kafka 3.8.1+ accepts that."""
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", CLIENT_NONCE)
    server = rfc_server()
    server_first = server.evaluate(client.first())
    doubled = client.final(server_first).replace(b"r=", b"r=" + CLIENT_NONCE.encode())
    # the proof covers the message as sent, so rebuild it over the doubled nonce

    f = ScramFormatter.for_mechanism("SCRAM-SHA-256")
    salted = f.salted_password("pencil", SALT, 4096)
    without_proof = doubled[: doubled.rindex(b",p=")]
    auth_message = CLIENT_FIRST[3:] + b"," + server_first + b"," + without_proof
    client_key = f.client_key(salted)
    proof = bytes(a ^ b for a, b in zip(client_key, f.hmac(f.stored_key(client_key), auth_message), strict=True))
    assert server.evaluate(without_proof + b",p=" + base64.b64encode(proof)).startswith(b"v=")
