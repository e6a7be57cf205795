"""Security keys: listener-prefixed keys, JAAS text, and the checks made before a broker starts."""

from __future__ import annotations

import pytest

from strom.config import BrokerConfig, ConfigError
from strom.config.jaas import JaasConfigError, parse_jaas_config

LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice \\"quoted\\" secret";')


def test_jaas_options_users_and_identity() -> None:
    jaas = parse_jaas_config(JAAS)
    assert jaas.login_module.endswith("PlainLoginModule") and jaas.control_flag == "required"
    assert (jaas.username, jaas.password) == ("admin", "admin-secret")
    assert jaas.plain_users() == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}
    assert "secret" not in repr(jaas)


@pytest.mark.parametrize("text", ["", "Module required", "Module sometimes a=\"b\";", "Module required a=\"b\"",
                                  "Module required a;", "M required a=\"b\"; N required c=\"d\";"])
def test_bad_jaas_text_is_refused(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)


def test_listener_prefixed_keys_win_over_broker_wide_ones() -> None:
    cfg = BrokerConfig({**LISTENERS, "ssl.client.auth": "none", "listener.name.sasl_ssl.ssl.client.auth": "required",
                        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                        "sasl.enabled.mechanisms": "PLAIN"})
    assert cfg.listener_config("SASL_SSL", "ssl.client.auth") == "required"
    assert cfg.listener_config("PLAINTEXT", "ssl.client.auth") == "none"
    assert cfg.listener_jaas_config("SASL_SSL", "PLAIN").plain_users()["admin"] == "admin-secret"
    assert cfg.listener_jaas_config("SASL_SSL", "SCRAM-SHA-256") is None
    assert cfg.get("sasl.enabled.mechanisms") == ["PLAIN"]


def test_an_unprefixed_jaas_config_serves_every_listener_and_mechanism() -> None:
    cfg = BrokerConfig({**LISTENERS, "sasl.jaas.config": JAAS})
    assert cfg.listener_jaas_config("SASL_SSL", "PLAIN").username == "admin"
    per_listener = BrokerConfig({**LISTENERS, "listener.name.sasl_ssl.sasl.jaas.config": JAAS.replace("admin", "root")})
    assert per_listener.listener_jaas_config("SASL_SSL", "SCRAM-SHA-512").username == "root"
    assert per_listener.listener_jaas_config("PLAINTEXT", "PLAIN") is None


@pytest.mark.parametrize(("props", "message"), [
    ({"listener.name.external.ssl.client.auth": "none"}, "names listener EXTERNAL, which is not in listeners"),
    ({"listener.name.sasl_ssl.ssl.client.auth": "maybe"}, "Invalid value 'maybe' for configuration "
                                                          "'listener.name.sasl_ssl.ssl.client.auth'"),
    ({"listener.name.sasl_ssl.log.dirs": "/x"}, "Unknown configuration 'listener.name.sasl_ssl.log.dirs'"),
    ({"listener.name.sasl_ssl.ssl.keystore.locaton": "/x"}, "did you mean"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "each item must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.name.sasl_ssl.plain.sasl.jaas.config": "nonsense"}, "sasl.jaas.config must read"),
    ({"security.inter.broker.protocol": "SASL_SSL", "sasl.enabled.mechanisms": "PLAIN"},
     "sasl.mechanism.inter.broker.protocol SCRAM-SHA-512 must be in sasl.enabled.mechanisms"),
])
def test_bad_security_keys_are_refused_naming_the_key(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BrokerConfig({**LISTENERS, **props})


def test_passwords_are_not_shown_in_describe_configs() -> None:
    cfg = BrokerConfig({**LISTENERS, "sasl.jaas.config": JAAS, "ssl.key.password": "pw"})
    rows = {e.name: e for e in cfg.items()}
    assert rows["sasl.jaas.config"].value is None and rows["sasl.jaas.config"].is_sensitive
    assert rows["ssl.key.password"].value is None
