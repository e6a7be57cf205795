"""Kafka's Java client security keys in librdkafka's words, so one client.properties (or Spark's kafka.* options)
serves confluent-kafka too: `sasl.jaas.config` gives sasl.username/sasl.password; PEM trust and key stores become
ssl.ca.location, ssl.certificate.location/ssl.key.location (or the inline *.pem keys); librdkafka's own keys pass
unchanged."""

from __future__ import annotations

from strom.config.jaas import JaasConfigError, parse_jaas_config


def java_to_librdkafka(props: dict[str, str]) -> dict[str, str]:
    """Raises ValueError for what librdkafka cannot use (a JKS/PKCS12 store, unreadable JAAS text)."""
    out = dict(props)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        try:
            parsed = parse_jaas_config(jaas)
        except JaasConfigError as exc:
            raise ValueError(f"invalid sasl.jaas.config: {exc}") from None
        if parsed.username is not None:
            out.setdefault("sasl.username", parsed.username)
        if parsed.password is not None:
            out.setdefault("sasl.password", parsed.password)
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = out.pop(key, "PEM")
        if kind.upper() != "PEM":
            raise ValueError(f"{key}={kind} is not supported: use PEM files (ssl.ca.location, "
                             "ssl.certificate.location, ...)")
    renames = {"ssl.truststore.location": "ssl.ca.location", "ssl.truststore.certificates": "ssl.ca.pem",
               "ssl.keystore.certificate.chain": "ssl.certificate.pem", "ssl.keystore.key": "ssl.key.pem"}
    for java, native in renames.items():
        if java in out:
            out.setdefault(native, out.pop(java))
    keystore = out.pop("ssl.keystore.location", None)
    if keystore:  # a PEM file holding the key and the certificate chain
        out.setdefault("ssl.certificate.location", keystore)
        out.setdefault("ssl.key.location", keystore)
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out
