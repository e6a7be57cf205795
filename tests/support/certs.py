"""Test certificates made with `cryptography`: a CA, a broker certificate for 127.0.0.1/localhost and client
certificates, written as PEM files (a broker key store holds its key and certificate chain in one file)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Identity:
    cert: Path  # certificate (then the CA certificate: the chain)
    key: Path  # private key, PEM (encrypted when a password was given)
    keystore: Path  # key + chain in one PEM file: ssl.keystore.location
    subject: str


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Strom Test")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "Strom Test CA") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = _key()
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self.ca_file = self.dir / f"{name.replace(' ', '-').lower()}.pem"
        self.ca_file.write_bytes(self.cert_pem)

    def issue(self, file_stem: str, cn: str, ou: str | None = None, server: bool = False,
              password: str | None = None) -> Identity:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(cn, ou)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        key_pem = _pem_key(key, password)
        cert_file, key_file, keystore = (self.dir / f"{file_stem}.crt", self.dir / f"{file_stem}.key",
                                         self.dir / f"{file_stem}.keystore.pem")
        cert_file.write_bytes(cert_pem)
        key_file.write_bytes(key_pem)
        keystore.write_bytes(key_pem + cert_pem)
        subject = ",".join(reversed([a.rfc4514_string() for a in cert.subject]))
        return Identity(cert_file, key_file, keystore, subject)
