"""Per-listener security built once at start-up from the broker config: SASL settings and TLS contexts."""

from __future__ import annotations

from strom.config import BrokerConfig, ConfigError
from strom.config.jaas import PLAIN_LOGIN_MODULE
from strom.config.listeners import EndPoint
from strom.security.authenticator import SaslListenerConfig
from strom.security.credential_cache import CredentialCache
from strom.security.login_throttle import LoginThrottle
from strom.security.sasl import PLAIN


def sasl_listener_config(cfg: BrokerConfig, endpoint: EndPoint, credentials: CredentialCache,
                         throttle: LoginThrottle) -> SaslListenerConfig:
    name = endpoint.listener_name
    mechanisms = tuple(cfg.listener_config(name, "sasl.enabled.mechanisms"))
    if not mechanisms:
        raise ConfigError(f"listener {name} uses {endpoint.security_protocol} but sasl.enabled.mechanisms is empty")
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        jaas = cfg.listener_jaas_config(name, PLAIN)
        if jaas is None or jaas.login_module != PLAIN_LOGIN_MODULE:
            raise ConfigError(f"listener {name} enables PLAIN but has no PlainLoginModule: set "
                              f"listener.name.{name.lower()}.plain.sasl.jaas.config={PLAIN_LOGIN_MODULE} required "
                              f"user_<name>=\"<password>\" ...;")
        plain_users = jaas.plain_users()
    return SaslListenerConfig(name, mechanisms, plain_users, credentials.scram_credential,
                              cfg.listener_config(name, "connections.max.reauth.ms"), throttle)
