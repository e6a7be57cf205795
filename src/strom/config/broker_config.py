"""BrokerConfig: a broker's configuration, ``server.properties`` plus overrides plus the dynamic layers.

The broker reads a Java-properties file in Kafka's ``server.properties`` format, so an
operator can carry a Kafka configuration over unchanged. Keys are strict: a typo such as
``log.segmnt.bytes`` fails at start-up instead of being silently ignored. Values are layered
as Kafka does (per-broker dynamic > cluster-default dynamic > static > default), and DescribeConfigs
rows report which layer each value came from.
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from strom.config.broker_defs import ALIASES, BROKER_CONFIGS
from strom.config.dynamic import (
    BROKER_SYNONYMS,
    DYNAMIC_BROKER_CONFIGS,
    LISTENER_ONLY_DYNAMIC_CONFIGS,
    PER_BROKER_CONFIGS,
    THREAD_CONFIGS,
)
from strom.config.jaas import JaasConfig, JaasConfigError, parse_jaas_config
from strom.config.listeners import EndPoint, ListenerError, parse_listeners, parse_protocol_map
from strom.config.properties import parse_properties
from strom.config.topic import TOPIC_CONFIGS
from strom.config.values import (
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    DynamicUpdateError,
    format_value,
    invalid_value,
    unknown_key,
)

LISTENER_PREFIX = "listener.name."
# Keys a listener may override, and the mechanisms that may prefix its sasl.* keys.
_LISTENER_KEY_PREFIXES = ("ssl.", "sasl.", "connections.", "connection.")
_PREFIXABLE_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})


class BrokerConfig:
    """Parsed broker configuration (``server.properties`` plus ``--override`` values).

    ``get(key)`` returns typed values. For the time keys Kafka derives from siblings
    (``log.retention.ms``, ``log.roll.ms``, ``log.roll.jitter.ms``,
    ``log.flush.interval.ms``, ``zookeeper.connection.timeout.ms``) it returns the
    effective value, so callers never redo the precedence rules.
    """

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self._raw: dict[str, str] = {}
        self._static: dict[str, Any] = {}  # server.properties and --override
        # Kafka's dynamic layers (/config/brokers/<default> and /config/brokers/<id>), parsed.
        self._dynamic_default: dict[str, Any] = {}
        self._dynamic_broker: dict[str, Any] = {}
        self._values: dict[str, Any] = {}  # the merged view every reader sees
        # listener.name.<listener>.[<mechanism>.]<key>: listener (upper case) -> "[mechanism.]key" -> value
        self._listener_static: dict[str, dict[str, Any]] = {}
        for key, raw in (props or {}).items():
            self._set(key, raw)
        self._merge()
        self._check()

    # -- loading

    @classmethod
    def load(cls, path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Read a properties file (or none) and apply ``key=value`` overrides on top."""
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    props.update(parse_properties(f.read()))
            except OSError as e:
                raise ConfigError(f"Cannot read configuration file {path}: {e.strerror}") from e
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid override '{item}': expected key=value")
            props[key.strip()] = value.strip()
        return cls(props)

    def _set(self, key: str, raw: str) -> None:
        if key.startswith(LISTENER_PREFIX):
            self._set_listener_key(key, raw)
            return
        definition = BROKER_CONFIGS.get(key)
        if definition is None:
            raise unknown_key(key, BROKER_CONFIGS)
        self._static[key] = definition.parse(raw)
        self._raw[key] = raw.strip()

    def _set_listener_key(self, key: str, raw: str) -> None:
        """`listener.name.<listener>.<key>` (and `...<mechanism>.sasl.*`): a broker key for one listener.

        Only the security keys may be prefixed (Kafka's per-listener configs); the value is checked like the
        unprefixed key's, the listener name against `listeners` once everything is read.
        """
        name, _, suffix = key[len(LISTENER_PREFIX):].partition(".")
        mechanism, base = "", suffix
        head, _, tail = suffix.partition(".")
        if head.upper() in _PREFIXABLE_MECHANISMS and tail.startswith("sasl."):
            mechanism, base = head.lower() + ".", tail
        definition = BROKER_CONFIGS.get(base)
        if not name or definition is None or not base.startswith(_LISTENER_KEY_PREFIXES):
            near = difflib.get_close_matches(base, [k for k in BROKER_CONFIGS if k.startswith(_LISTENER_KEY_PREFIXES)],
                                             n=1)
            hint = f" (did you mean '{LISTENER_PREFIX}{name}.{mechanism}{near[0]}'?)" if near else ""
            raise ConfigError(f"Unknown configuration '{key}': listener.name.<listener>. prefixes only ssl.*, "
                              f"sasl.* and connection(s).* keys{hint}")
        try:
            value = definition.parse(raw)
        except ConfigError as exc:
            raise invalid_value(key, raw.strip(), str(exc).rsplit("': ", 1)[-1]) from None
        self._listener_static.setdefault(name.upper(), {})[mechanism + base] = value
        self._raw[key] = raw.strip()

    def listener_config(self, listener_name: str, key: str, mechanism: str | None = None) -> Any:
        """A key's value for one listener: `listener.name.<l>.<mechanism>.<key>`, then `listener.name.<l>.<key>`,
        then the broker-wide key (Kafka's per-listener lookup)."""
        props = self._listener_static.get(listener_name.upper())
        if props:
            if mechanism is not None and (found := props.get(f"{mechanism.lower()}.{key}")) is not None:
                return found
            if key in props:
                return props[key]
        return self.get(key)

    def listener_jaas_config(self, listener_name: str, mechanism: str) -> JaasConfig | None:
        """The JAAS login module a SASL listener uses for one mechanism (None when none is configured)."""
        text = self.listener_config(listener_name, "sasl.jaas.config", mechanism)
        return parse_jaas_config(text) if text else None

    def _check_security(self, names: set[str]) -> None:
        unknown = sorted(set(self._listener_static) - names)
        if unknown:
            raise ConfigError(f"listener.name.{unknown[0].lower()}.* names listener {unknown[0]}, which is not in "
                              f"listeners ({', '.join(sorted(names))})")
        jaas_keys = [k for k in self._raw if k == "sasl.jaas.config" or k.endswith(".sasl.jaas.config")]
        for key in jaas_keys:
            try:
                parse_jaas_config(self._raw[key])
            except JaasConfigError as exc:
                raise ConfigError(f"Invalid value for configuration '{key}': {exc}") from None
        inter = self.inter_broker_listener_name()
        for ep in self.listeners():
            if ep.listener_name == inter and ep.uses_sasl:
                mechanism = self.get("sasl.mechanism.inter.broker.protocol")
                enabled = self.listener_config(inter, "sasl.enabled.mechanisms")
                if mechanism not in enabled:
                    raise ConfigError(f"sasl.mechanism.inter.broker.protocol {mechanism} must be in "
                                      f"sasl.enabled.mechanisms of the inter-broker listener {inter} "
                                      f"({','.join(enabled)})")

    def _check_listeners(self) -> None:
        try:
            bound = self.listeners()
            advertised = self.advertised_listeners()
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        names = {ep.listener_name for ep in bound}
        ports = [ep.port for ep in bound if ep.port]
        if len(ports) != len(set(ports)):
            raise ConfigError(f"Invalid value '{','.join(self.get('listeners'))}' for configuration 'listeners': "
                              "each listener needs its own port")
        for ep in advertised:
            if ep.host == "0.0.0.0":
                raise ConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0; "
                    "set advertised.listeners to a routable address"
                )
            if ep.listener_name not in names:
                raise ConfigError(f"advertised.listeners names listener {ep.listener_name}, which is not in "
                                  "listeners")
        inter = self.inter_broker_listener_name()
        if inter not in names:
            raise ConfigError(f"inter.broker.listener.name must be a listener name in listeners "
                              f"({', '.join(sorted(names))}); got {inter}. Set inter.broker.listener.name or "
                              "security.inter.broker.protocol")
        self._check_security(names)

    def _merge(self) -> None:
        """Precedence as Kafka: per-broker dynamic > cluster-default dynamic > static > default.

        A new dict is swapped in whole, so a reader on another thread sees the old or the new view.
        """
        self._values = {**self._static, **self._dynamic_default, **self._dynamic_broker}

    def _check(self) -> None:
        """Cross-key rules Kafka enforces at start-up."""
        bid, nid = self._values.get("broker.id"), self._values.get("node.id")
        if bid is not None and nid is not None and bid != nid:
            raise ConfigError(f"broker.id ({bid}) and node.id ({nid}) must be equal when both are set")
        if not self.get("listeners"):
            raise ConfigError("Invalid value '' for configuration 'listeners': at least one listener is required")
        self._check_listeners()
        if "log.dirs" in self._values and not self._values["log.dirs"]:
            # Kafka refuses an empty list; silently falling back to log.dir would hide a typo.
            raise ConfigError("Invalid value '' for configuration 'log.dirs': at least one directory is required")
        if not self.get_raw("log.dir"):
            raise ConfigError("Invalid value '' for configuration 'log.dir': a directory is required")
        lo, hi = self.get("group.min.session.timeout.ms"), self.get("group.max.session.timeout.ms")
        if lo > hi:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        self._check_consumer_group_timeouts()
        if self.get("replica.fetch.wait.max.ms") > self.get("replica.socket.timeout.ms"):
            raise ConfigError("replica.socket.timeout.ms must be at least replica.fetch.wait.max.ms: a follower's "
                              "fetch would time out while the leader still waits for data")

    def _check_consumer_group_timeouts(self) -> None:
        """KIP-848 timeouts within their bounds, and a heartbeat well inside the session (as Kafka checks)."""
        for name in ("session.timeout.ms", "heartbeat.interval.ms"):
            value = self.get(f"group.consumer.{name}")
            lo, hi = self.get(f"group.consumer.min.{name}"), self.get(f"group.consumer.max.{name}")
            if not lo <= value <= hi:
                raise ConfigError(f"group.consumer.{name} must be between group.consumer.min.{name} ({lo}) and "
                                  f"group.consumer.max.{name} ({hi}), not {value}")
        if self.get("group.consumer.heartbeat.interval.ms") >= self.get("group.consumer.session.timeout.ms"):
            raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")

    # -- access

    def is_set(self, key: str) -> bool:
        """True when the key was given explicitly (file or override), not defaulted."""
        if key == "broker.id":
            return "broker.id" in self._values or "node.id" in self._values
        return key in self._values

    def get(self, key: str) -> Any:
        """Typed value of a broker key (effective value for derived time keys)."""
        if key not in BROKER_CONFIGS:
            raise unknown_key(key, BROKER_CONFIGS)
        key = ALIASES.get(key, key)
        v = self._values
        if key == "broker.id":
            return v.get("broker.id", v.get("node.id", 0))
        if key == "log.retention.ms":
            return self.retention_ms()
        if key == "log.roll.ms":
            return v["log.roll.ms"] if "log.roll.ms" in v else self.get_raw("log.roll.hours") * 3_600_000
        if key == "log.roll.jitter.ms":
            if "log.roll.jitter.ms" in v:
                return v["log.roll.jitter.ms"]
            return self.get_raw("log.roll.jitter.hours") * 3_600_000
        if key == "log.flush.interval.ms":
            if "log.flush.interval.ms" in v:
                return v["log.flush.interval.ms"]
            return self.get_raw("log.flush.scheduler.interval.ms")
        if key == "zookeeper.connection.timeout.ms":
            return v.get(key, self.get_raw("zookeeper.session.timeout.ms"))
        if key == "advertised.listeners":
            return v.get(key) or self.get("listeners")
        if key == "log.dirs":
            return self.log_dirs()
        return self.get_raw(key)

    __getitem__ = get

    def get_raw(self, key: str) -> Any:
        """The key's own typed value or its default, without derivation (None = unset)."""
        if key in self._values:
            return self._values[key]
        return BROKER_CONFIGS[key].default

    def retention_ms(self) -> int:
        """Effective retention: log.retention.ms > .minutes > .hours; any negative = -1."""
        v = self._values
        if "log.retention.ms" in v:
            ms = v["log.retention.ms"]
        elif "log.retention.minutes" in v:
            ms = v["log.retention.minutes"] * 60_000
        else:
            ms = self.get_raw("log.retention.hours") * 3_600_000
        return -1 if ms < 0 else ms

    def listener_security_protocol_map(self) -> dict[str, str]:
        return parse_protocol_map(self.get("listener.security.protocol.map"))

    def listeners(self) -> list[EndPoint]:
        """Endpoints to bind, in the order configured (port 0 = any free port)."""
        return parse_listeners(self.get("listeners"), self.listener_security_protocol_map(), "listeners")

    def advertised_listeners(self, bound: Mapping[str, int] | None = None) -> list[EndPoint]:
        """Endpoints given to clients; an empty host becomes this host's name, port 0 the bound port."""
        key = "advertised.listeners" if self._values.get("advertised.listeners") else "listeners"
        out = []
        for ep in parse_listeners(self.get("advertised.listeners"), self.listener_security_protocol_map(), key):
            host = ep.host or socket.gethostname()  # Kafka advertises the canonical host name here
            port = ep.port or (bound or {}).get(ep.listener_name, 0)
            out.append(EndPoint(ep.listener_name, ep.security_protocol, host, port))
        return out

    def inter_broker_listener_name(self) -> str:
        name = self.get("inter.broker.listener.name")
        if name:
            return name.strip().upper()
        protocol = (self.get("security.inter.broker.protocol") or "PLAINTEXT").strip().upper()
        for ep in self.listeners():
            if ep.security_protocol == protocol:
                return ep.listener_name
        return protocol  # reported by _check: no listener speaks it

    def advertised_host_port(self) -> tuple[str, int]:
        """(host, port) other brokers and tools reach this broker at: the inter-broker listener's."""
        ep = self._inter_broker(self.advertised_listeners())
        return ep.host, ep.port

    def _inter_broker(self, endpoints: list[EndPoint]) -> EndPoint:
        name = self.inter_broker_listener_name()
        for ep in endpoints:
            if ep.listener_name == name:
                return ep
        return endpoints[0]

    def log_dirs(self) -> list[str]:
        """Data directories: log.dirs if set, else log.dir."""
        dirs = self._values.get("log.dirs")
        return list(dirs) if dirs else [self.get("log.dir")]

    def check_log_dirs(self) -> tuple[list[str], dict[str, str]]:
        """Create missing data directories and prove each is a writable directory.

        Returns the usable ones (absolute) and, for the others, why they failed. As Kafka, a
        failing dir next to a usable one goes offline (the broker serves the rest); when none is
        usable, start-up fails with the key named instead of a traceback from deep inside log
        loading. Run at broker start-up (not at parse time: it touches the file system).
        """
        key = "log.dirs" if self._values.get("log.dirs") else "log.dir"
        usable: list[str] = []
        failed: dict[str, str] = {}
        first_error: ConfigError | None = None
        for d in self.log_dirs():
            path = os.path.abspath(d)
            if path in usable or path in failed:
                raise invalid_value(key, ",".join(self.log_dirs()), f"{d} is listed twice")
            problem = None
            if os.path.exists(path) and not os.path.isdir(path):
                problem = "it is a file, not a directory"
            else:
                try:
                    os.makedirs(path, exist_ok=True)
                except OSError as e:
                    problem = f"cannot create the directory: {e.strerror}"
                else:
                    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
                        problem = "the directory is not readable and writable by this user"
            if problem is None:
                usable.append(path)
            else:
                failed[path] = problem
                first_error = first_error or invalid_value(key, d, problem)
        if not usable and first_error is not None:
            raise first_error
        return usable, failed

    def _layers(self, per_broker: bool = True) -> list[tuple[ConfigSource, dict[str, Any]]]:
        layers = [(ConfigSource.DYNAMIC_BROKER_CONFIG, self._dynamic_broker)] if per_broker else []
        return layers + [(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self._dynamic_default),
                         (ConfigSource.STATIC_BROKER_CONFIG, self._static)]

    def synonyms(self, names: Iterable[str], per_broker: bool = True) -> list[ConfigSynonym]:
        """DescribeConfigs synonyms of keys fed by ``names``: layer by layer, then the first default."""
        out: list[ConfigSynonym] = []
        for source, layer in self._layers(per_broker):
            for name in names:
                if name in layer:
                    out.append(ConfigSynonym(name, format_value(BROKER_CONFIGS[name].type, layer[name]), int(source)))
        for name in names:
            d = BROKER_CONFIGS[name]
            if d.default is not None:
                out.append(ConfigSynonym(name, format_value(d.type, d.default), int(ConfigSource.DEFAULT_CONFIG)))
                break
        return out

    def items(self, per_broker: bool = True) -> list[ConfigEntry]:
        """Broker resource rows for DescribeConfigs, with sources and synonyms.

        ``per_broker``: this broker's whole config (resource name = its id). Otherwise the cluster
        default resource (name ""), which as in Kafka lists only the keys set at that level.
        Dynamic keys are reported with read_only=False.
        """
        out = []
        for d in BROKER_CONFIGS.values():
            if not per_broker and d.name not in self._dynamic_default:
                continue
            source = next((s for s, layer in self._layers(per_broker) if d.name in layer),
                          ConfigSource.DEFAULT_CONFIG)
            if d.name in ("broker.id", "node.id"):
                value = format_value(d.type, self.get(d.name))
            elif per_broker:
                value = format_value(d.type, self.get_raw(d.name))
            else:
                value = format_value(d.type, self._dynamic_default[d.name])
            out.append(
                ConfigEntry(
                    name=d.name,
                    value=None if d.sensitive else value,
                    source=int(source),
                    is_default=source == ConfigSource.DEFAULT_CONFIG,
                    read_only=d.name not in DYNAMIC_BROKER_CONFIGS,
                    is_sensitive=d.sensitive,
                    config_type=int(d.type),
                    documentation=d.doc,
                    synonyms=tuple(self.synonyms(BROKER_SYNONYMS.get(d.name, (d.name,)), per_broker)),
                )
            )
        return out

    # -- dynamic configs (AlterConfigs on a broker resource)

    def dynamic_configs(self, per_broker: bool) -> dict[str, str]:
        """One dynamic layer as strings: what ``/config/brokers/<id>`` (or ``<default>``) holds."""
        layer = self._dynamic_broker if per_broker else self._dynamic_default
        return {k: format_value(BROKER_CONFIGS[k].type, v) or "" for k, v in layer.items()}

    def validate_dynamic_update(self, configs: Mapping[str, str], per_broker: bool) -> dict[str, str]:
        """Check a layer's new contents; returns them normalised for storage.

        Raises DynamicUpdateError for keys that are unknown, static, or per-broker only when the
        cluster default is changed (Kafka's INVALID_REQUEST), ConfigError for a bad value.
        """
        static = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIGS)
        if static:
            raise DynamicUpdateError(f"Cannot update these configs dynamically: {', '.join(static)}")
        unprefixed = sorted(k for k in configs if k in LISTENER_ONLY_DYNAMIC_CONFIGS)
        if unprefixed:
            raise DynamicUpdateError("These security configs can be dynamically updated only per-listener using "
                                     f"the listener prefix: {', '.join(unprefixed)}")
        if not per_broker:
            only_one = sorted(k for k in configs if k in PER_BROKER_CONFIGS)
            if only_one:
                raise DynamicUpdateError("Cannot update these configs at default cluster level, broker id must "
                                         f"be specified: {', '.join(only_one)}")
        parsed = {k: BROKER_CONFIGS[k].parse(v or "") for k, v in configs.items()}
        for key in THREAD_CONFIGS & parsed.keys():
            current, new = self.get(key), parsed[key]
            if new < 1:
                raise invalid_value(key, str(new), "must be at least 1 when changed dynamically")
            if current >= 1 and not current / 2 <= new <= current * 2:
                raise invalid_value(key, str(new), f"may change to between half and double the current value {current}")
        candidate = object.__new__(BrokerConfig)
        candidate.__dict__.update(self.__dict__)
        if per_broker:
            candidate._dynamic_broker = parsed
        else:
            candidate._dynamic_default = parsed
        candidate._merge()
        candidate._check()  # cross-key rules (e.g. advertised.listeners must be routable)
        return {k: format_value(BROKER_CONFIGS[k].type, v) or "" for k, v in parsed.items()}

    def set_dynamic_configs(self, per_broker: Mapping[str, str] | None = None,
                            default: Mapping[str, str] | None = None) -> tuple[set[str], list[str]]:
        """Replace the dynamic layers given (None keeps one); returns (keys whose effective value
        changed, problems). Entries that no longer validate are skipped, as Kafka skips invalid
        persisted dynamic configs instead of refusing to start."""
        problems: list[str] = []

        def parse(layer: Mapping[str, str], is_broker: bool) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for key, raw in layer.items():
                if key not in DYNAMIC_BROKER_CONFIGS or (not is_broker and key in PER_BROKER_CONFIGS):
                    problems.append(f"ignoring dynamic config {key}: not dynamic at this level")
                    continue
                try:
                    out[key] = BROKER_CONFIGS[key].parse(raw or "")
                except ConfigError as exc:
                    problems.append(f"ignoring dynamic config {key}: {exc}")
            return out

        before = {k: self.get(k) for k in BROKER_CONFIGS}
        saved = (self._dynamic_broker, self._dynamic_default)
        if per_broker is not None:
            self._dynamic_broker = parse(per_broker, True)
        if default is not None:
            self._dynamic_default = parse(default, False)
        self._merge()
        try:
            self._check()
        except ConfigError as exc:
            self._dynamic_broker, self._dynamic_default = saved
            self._merge()
            problems.append(f"ignoring dynamic configs: {exc}")
        changed = {k for k in BROKER_CONFIGS if self.get(k) != before[k]}
        return changed, problems

    def topic_defaults(self) -> dict[str, str]:
        """Topic key → default string derived from this broker's config."""
        return {name: self.topic_default_str(name) for name in TOPIC_CONFIGS}

    def topic_default(self, name: str) -> Any:
        """Typed default of one topic key on this broker."""
        d = TOPIC_CONFIGS[name]
        return self.get(d.synonyms[0]) if d.synonyms else d.default

    def topic_default_str(self, name: str) -> str:
        """The default of one topic key as DescribeConfigs shows it."""
        return format_value(TOPIC_CONFIGS[name].type, self.topic_default(name)) or ""

    def __repr__(self) -> str:
        return f"BrokerConfig({self._raw!r})"
