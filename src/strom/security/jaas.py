"""Moved to :mod:`strom.config.jaas` (configuration is the bottom layer); kept so older imports work."""

from strom.config.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfig,
    JaasConfigError,
    parse_jaas_config,
)

__all__ = ["PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE", "JaasConfig", "JaasConfigError", "parse_jaas_config"]
