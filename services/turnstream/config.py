"""The settings vocabulary every deployable and command shares.

Owns :class:`Secret` (a string masked in every ``repr``), :class:`Setting` (one
declared setting: name, flags, variable, default, help), the names of the
variables several commands read (the Kafka connection and security ones) and
:func:`bootstrap_source`, the one lookup of the bootstrap servers. Each
deployable declares its settings once with :class:`Setting` (in its own
``settings`` module) and reads them with :class:`SettingsReader`; the CLI
generates its options and ``docs/settings.md`` its tables from those
declarations.

A leaf: imports only the standard library, :mod:`turnstream.errors` and
:mod:`turnstream.resources` (the schema directory's variable); reads
the environment only from the mapping passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from turnstream.errors import ConfigError
from turnstream.resources import SCHEMA_DIR_ENV

__all__ = [
    "BOOTSTRAP",
    "BOOTSTRAP_ENV",
    "BROKER_PORT_ENV",
    "DEFAULT_BOOTSTRAP",
    "KAFKA_TIMEOUT_ENV",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "PARTITIONS",
    "REPLICATION_FACTOR",
    "SASL_PASSWORD_ENV",
    "SECURITY",
    "SECURITY_ENV",
    "SSL_KEY_PASSWORD_ENV",
    "TIMEOUT",
    "TOPIC_PREFIX",
    "TOPIC_PREFIX_ENV",
    "TOPIC_SUFFIX",
    "TOPIC_SUFFIX_ENV",
    "Secret",
    "Setting",
    "SettingsReader",
    "bootstrap_source",
    "lookup",
    "parse_bootstrap",
    "resolve_bootstrap",
]

BOOTSTRAP_ENV: Final = "KAFKA_BOOTSTRAP_SERVERS"
BROKER_PORT_ENV: Final = "TURNSTREAM_BROKER_PORT"
"""The local development broker's port (its bootstrap when nothing else is set)."""
DEFAULT_BOOTSTRAP: Final = "127.0.0.1:19092"
KAFKA_TIMEOUT_ENV: Final = "TURNSTREAM_KAFKA_TIMEOUT"
TOPIC_PREFIX_ENV: Final = "TURNSTREAM_TOPIC_PREFIX"
TOPIC_SUFFIX_ENV: Final = "TURNSTREAM_TOPIC_SUFFIX"
SECURITY_ENV: Final[Mapping[str, str]] = {
    "security_protocol": "TURNSTREAM_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "TURNSTREAM_KAFKA_SASL_MECHANISM",
    "sasl_username": "TURNSTREAM_KAFKA_SASL_USERNAME",
    "ssl_cafile": "TURNSTREAM_KAFKA_SSL_CAFILE",
    "ssl_certfile": "TURNSTREAM_KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "TURNSTREAM_KAFKA_SSL_KEYFILE",
}
"""The Kafka security settings that have a flag, by setting name."""
SASL_PASSWORD_ENV: Final = "TURNSTREAM_KAFKA_SASL_PASSWORD"  # noqa: S105 - a name
SSL_KEY_PASSWORD_ENV: Final = "TURNSTREAM_KAFKA_SSL_KEY_PASSWORD"  # noqa: S105

_MASK: Final = "********"
_BOOLEANS: Final = {
    "true": True,
    "1": True,
    "yes": True,
    "false": False,
    "0": False,
    "no": False,
}
# host:port, where host is a name, an IPv4 address or a bracketed IPv6 address.
_SERVER = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret string: ``repr``/``str`` show a mask, never the value.

    Call :meth:`reveal` at the one place the value is handed to a client.
    """

    _value: str = field(repr=False)

    def reveal(self) -> str:
        """The secret itself (hand it to the client, never to a log)."""
        return self._value

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the secret masked."""
        return text.replace(self._value, "[redacted]") if self._value else text

    def __repr__(self) -> str:
        return f"Secret({_MASK})"

    def __str__(self) -> str:
        return _MASK

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One setting of a deployable, declared once.

    The CLI makes its option from ``flags`` (none: the setting is read from
    ``env`` only, as secrets are), the settings reference lists it, and the
    deployable's parser reads it (the flag's value, else the variable's).

    Attributes:
        name: the setting's name (the parser's key, the command's parameter).
        env: its environment variable (``None``: a flag only).
        flags: its option names, the first the long form (empty: no flag).
        default: the default as shown in help and the reference.
        help: one sentence for ``--help`` and the reference.
        kind: the flag's type (``str``, ``int``, ``float``, ``bool``: an on/off
            switch, ``list``: a repeatable option).
        minimum: the smallest value the flag takes (numbers; ``None``: any).
        maximum: the largest value the flag takes (numbers; ``None``: any).
        panel: the ``--help`` section it is listed under.
        secret: read from ``env`` only and masked (never a flag).
        flag_reads_env: the CLI reads ``env`` into the flag's value (click's
            ``envvar``), so the parser takes the flag as given; ``False``: the
            parser reads the variable itself (a repeatable option's
            comma-separated list, the bootstrap's three-way lookup).
        required: the command refuses to start without it.
    """

    name: str
    env: str | None
    flags: tuple[str, ...] = ()
    default: str | int | float | bool | None = None
    help: str
    kind: type[object] = str
    minimum: float | None = None
    maximum: float | None = None
    panel: str | None = None
    secret: bool = False
    flag_reads_env: bool = True
    required: bool = False

    def __post_init__(self) -> None:
        if self.secret and self.flags:
            raise ValueError(f"{self.name}: a secret has no flag")
        if not (self.flags or self.env):
            raise ValueError(f"{self.name}: neither a flag nor a variable")

    @property
    def flag(self) -> str | None:
        """The long flag (``None`` for a setting read from the environment only)."""
        return self.flags[0] if self.flags else None


def parse_bootstrap(raw: str, *, setting: str = BOOTSTRAP_ENV) -> str:
    """Validate a comma-separated ``host:port`` list and return it normalised.

    Args:
        raw: e.g. ``"127.0.0.1:19092"`` or ``"kafka-1:9092, kafka-2:9092"``.
        setting: the flag or variable named in the error.

    Raises:
        ConfigError: empty, or an entry is not ``host:port`` with a valid port.
    """
    servers = [part.strip() for part in raw.split(",") if part.strip()]
    if not servers:
        raise ConfigError(setting, "no bootstrap server given (expected host:port)")
    for server in servers:
        match = _SERVER.match(server)
        if match is None or not 1 <= int(match.group(1)) <= 65535:
            raise ConfigError(setting, f"{server!r} is not host:port")
    return ",".join(servers)


def bootstrap_source(flag: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """The bootstrap servers as given, and the flag or variable that gave them.

    The order is the ``--bootstrap`` flag, then ``KAFKA_BOOTSTRAP_SERVERS``, then
    the local development broker (``127.0.0.1:$TURNSTREAM_BROKER_PORT``, port 19092
    by default). Not validated: see :func:`resolve_bootstrap`.
    """
    if flag is not None and flag.strip():
        return flag, "--bootstrap"
    from_env = env.get(BOOTSTRAP_ENV, "").strip()
    if from_env:
        return from_env, BOOTSTRAP_ENV
    port = env.get(BROKER_PORT_ENV, "").strip()
    if port:
        return f"127.0.0.1:{port}", BROKER_PORT_ENV
    return DEFAULT_BOOTSTRAP, "bootstrap"


def resolve_bootstrap(flag: str | None, env: Mapping[str, str]) -> str:
    """The bootstrap servers (:func:`bootstrap_source`), validated and normalised.

    Raises:
        ConfigError: the chosen value is malformed (naming its flag or variable).
    """
    raw, setting = bootstrap_source(flag, env)
    return parse_bootstrap(raw, setting=setting)


# Settings several commands share, declared once. A command that shows a
# different default copies one with ``dataclasses.replace``.
KAFKA_PANEL: Final = "Kafka connection"
SECURITY_PANEL: Final = "Kafka security"

BOOTSTRAP = Setting(
    name="bootstrap",
    env=BOOTSTRAP_ENV,
    flags=("--bootstrap", "-b"),
    help="Kafka host:port[,host:port]; default $KAFKA_BOOTSTRAP_SERVERS, "
    "else the local broker 127.0.0.1:19092.",
    panel=KAFKA_PANEL,
    flag_reads_env=False,  # resolve_bootstrap's three-way lookup reads it
)
TIMEOUT = Setting(
    name="timeout",
    env=KAFKA_TIMEOUT_ENV,
    flags=("--timeout",),
    default=10.0,
    help="Seconds allowed for each Kafka call (connect, send, read).",
    kind=float,
    minimum=0.1,
    panel=KAFKA_PANEL,
)
TOPIC_PREFIX = Setting(
    name="topic_prefix",
    env=TOPIC_PREFIX_ENV,
    flags=("--topic-prefix", "--prefix"),
    help="Prepended to every topic name (an isolated topic set).",
    panel=KAFKA_PANEL,
)
TOPIC_SUFFIX = Setting(
    name="topic_suffix",
    env=TOPIC_SUFFIX_ENV,
    flags=("--topic-suffix", "--suffix"),
    help="Appended to every topic name (an isolated topic set).",
    panel=KAFKA_PANEL,
)


def _security(name: str, text: str, *, default: str | None = None) -> Setting:
    # A flag named like the setting, its variable from SECURITY_ENV.
    return Setting(
        name=name,
        env=SECURITY_ENV[name],
        flags=(f"--{name.replace('_', '-')}",),
        default=default,
        help=text,
        panel=SECURITY_PANEL,
    )


def _password(name: str, env: str, text: str) -> Setting:
    return Setting(name=name, env=env, help=text, panel=SECURITY_PANEL, secret=True)


SECURITY: Final = (
    _security(
        "security_protocol",
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
        default="PLAINTEXT",
    ),
    _security(
        "sasl_mechanism",
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; needs a SASL_* protocol.",
    ),
    _security(
        "sasl_username",
        f"SASL user; the password is read from {SASL_PASSWORD_ENV} only.",
    ),
    _password(
        "sasl_password", SASL_PASSWORD_ENV, "The SASL password (environment only)."
    ),
    _security(
        "ssl_cafile",
        "CA bundle (PEM) to verify the brokers with; system CAs if unset.",
    ),
    _security("ssl_certfile", "Client certificate (PEM), mutual TLS."),
    _security(
        "ssl_keyfile",
        "The client certificate's key (PEM); its password is read from "
        f"{SSL_KEY_PASSWORD_ENV} only.",
    ),
    _password(
        "ssl_key_password",
        SSL_KEY_PASSWORD_ENV,
        "The client key's password (environment only).",
    ),
)
"""The Kafka security settings every command that talks to Kafka reads."""
LOG_FORMAT = Setting(
    name="log_format",
    env="TURNSTREAM_LOG_FORMAT",
    flags=("--log-format",),
    default="json",
    help="json (one object per line) or text. Logs go to stderr and never "
    "contain message contents.",
)
LOG_LEVEL = Setting(
    name="log_level",
    env="TURNSTREAM_LOG_LEVEL",
    flags=("--log-level",),
    default="INFO",
    help="DEBUG, INFO, WARNING or ERROR.",
)
PARTITIONS = Setting(
    name="partitions",
    env="TURNSTREAM_TOPIC_PARTITIONS",
    flags=("--partitions",),
    help="Partitions for every topic (default: infra/topics.yaml).",
    kind=int,
    minimum=1,
)
SCHEMA_DIR = Setting(
    name="schema_dir",
    env=SCHEMA_DIR_ENV,
    flags=("--schema-dir",),
    help="Avro schema directory (default: the packaged one).",
)
REPLICATION_FACTOR = Setting(
    name="replication_factor",
    env="TURNSTREAM_TOPIC_REPLICATION_FACTOR",
    flags=("--replication-factor",),
    help="Replication factor for every topic (default: the cluster's "
    "default.replication.factor, else min(3, brokers); 1 on several brokers "
    "only when given here).",
    kind=int,
    minimum=1,
)


def lookup(
    setting: Setting, flags: Mapping[str, object], env: Mapping[str, str]
) -> object | None:
    """A setting's raw value: its flag, else its variable; blank counts as unset.

    A flag the CLI passed as unset (``None``) whose variable the CLI reads
    itself (:attr:`Setting.flag_reads_env`) is unset: the variable was already
    looked at, once. A setting missing from ``flags`` (a caller without flags,
    or one without a flag) is read from ``env``.
    """
    given = flags.get(setting.name)
    if isinstance(given, str):
        given = given.strip() or None
    elif isinstance(given, (list, tuple)):
        given = tuple(given) or None
    elif given is False:
        given = None
    if given is not None:
        return given
    if setting.name in flags and setting.flag_reads_env and setting.flags:
        return None
    raw = env.get(setting.env, "").strip() if setting.env else ""
    return raw or None


@dataclass(frozen=True, slots=True)
class SettingsReader:
    """Reads a deployable's settings: each flag, else its variable (see :func:`lookup`).

    Attributes:
        settings: the deployable's declared settings, by name.
        flags: the flags given, by setting name.
        env: the environment.
    """

    settings: Mapping[str, Setting]
    flags: Mapping[str, object]
    env: Mapping[str, str]

    def raw(self, name: str) -> object | None:
        """The setting's value as given (``None``: unset)."""
        return lookup(self.settings[name], self.flags, self.env)

    def text(self, name: str) -> str | None:
        """The setting as a string (``None``: unset)."""
        raw = self.raw(name)
        return None if raw is None else str(raw)

    def secret(self, name: str) -> Secret | None:
        """A secret setting, read from its variable only (``None``: unset)."""
        setting = self.settings[name]
        value = (self.env.get(setting.env, "") if setting.env else "").strip()
        return Secret(value) if value else None

    def number(self, name: str, kind: type[int] | type[float]) -> int | float | None:
        """The setting as a ``kind`` (``None``: unset).

        Raises:
            ConfigError: the value is not a number.
        """
        raw = self.raw(name)
        if raw is None:
            return None
        value = raw if isinstance(raw, (int, float)) else str(raw)
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(name, f"{raw!r} is not a number") from None

    def switch(self, name: str) -> bool | None:
        """The setting as on/off (``None``: unset).

        Raises:
            ConfigError: the value is not true or false (1/0, yes/no).
        """
        raw = self.raw(name)
        if raw is None or isinstance(raw, bool):
            return raw
        text = str(raw).lower()
        if text not in _BOOLEANS:
            raise ConfigError(name, f"{raw!r} is not true or false")
        return _BOOLEANS[text]

    def names(self, name: str) -> tuple[str, ...] | None:
        """A repeatable setting's items (``None``: unset or all blank).

        The variable is a comma-separated list; the flag, one item a use.
        """
        raw = self.raw(name)
        if isinstance(raw, str):
            items: list[str] = raw.split(",")  # the variable: comma-separated
        else:
            items = [str(a) for a in raw] if isinstance(raw, (list, tuple)) else []
        kept = tuple(a.strip() for a in items if a.strip())
        return kept or None
