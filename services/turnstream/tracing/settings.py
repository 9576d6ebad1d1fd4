"""Tracing settings: one table of environment variables, read once.

Owns :class:`TracingSettings` and :data:`TRACING_ENV`. The actor
(``turnstream actor run``) and ``turnstream traces export`` read the same
table; the standard ``OTEL_*`` variables are honoured where turnstream's own
are unset. Pure: imports no OpenTelemetry package (the settings are read
whether or not the ``otel`` extra is installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from turnstream.config import Setting
from turnstream.errors import ConfigError

__all__ = ["TRACING_ENV", "TRACING_SETTINGS", "TracingSettings"]

TRACING_ENV = {
    "endpoint": ("TURNSTREAM_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    "sample_ratio": ("TURNSTREAM_OTEL_SAMPLE_RATIO", "OTEL_TRACES_SAMPLER_ARG"),
    "service_name": ("TURNSTREAM_OTEL_SERVICE_NAME", "OTEL_SERVICE_NAME"),
    "capture_content": ("TURNSTREAM_OTEL_CAPTURE_CONTENT",),
}
"""Setting to its variables, first set wins: turnstream's, then the standard one.

``endpoint`` is the OTLP/HTTP base address (``http://127.0.0.1:4318``; spans go
to its ``/v1/traces``); unset, tracing is off. ``OTEL_SDK_DISABLED=true``
turns it off whatever is set.
"""

_SERVICE_NAME = "turnstream-actor"
_HELP = {
    "endpoint": "OTLP/HTTP base address of the trace collector "
    "(http://host:4318); unset, tracing is off.",
    "sample_ratio": "Share of turns traced when the submit carried no decision "
    "of its own (0 to 1).",
    "service_name": f"The service.name of the spans ({_SERVICE_NAME}).",
    "capture_content": "Record message text on model spans (true or false).",
}

TRACING_SETTINGS = tuple(
    Setting(
        name=f"otel_{name}",
        env=variables[0],
        help=_HELP[name] + (f" Else {variables[1]}." if len(variables) > 1 else ""),
        panel="Tracing",
    )
    for name, variables in TRACING_ENV.items()
)
"""The tracing settings as declarations (environment only), for the reference."""
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TracingSettings:
    """Where and how much to trace.

    Attributes:
        endpoint: the OTLP/HTTP base address; empty: tracing off.
        sample_ratio: the share of turns traced (by trace id) when the submit
            carried no decision of its own; 1.0 traces every turn.
        service_name: the ``service.name`` resource attribute.
        capture_content: record message text on model spans (off by default:
            prompts and answers are user data).
    """

    endpoint: str = ""
    sample_ratio: float = 1.0
    service_name: str = _SERVICE_NAME
    capture_content: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ConfigError("otel_sample_ratio", "must be between 0 and 1")
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigError("otel_endpoint", "must be an http:// or https:// URL")

    @property
    def enabled(self) -> bool:
        """Whether spans are exported."""
        return bool(self.endpoint)

    @property
    def traces_url(self) -> str:
        """The OTLP/HTTP traces address."""
        base = self.endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, service_name: str | None = None
    ) -> TracingSettings:
        """Read the settings from ``env`` (see :data:`TRACING_ENV`).

        Raises:
            ConfigError: a value is malformed.
        """

        def first(name: str) -> str | None:
            for variable in TRACING_ENV[name]:
                value = env.get(variable)
                if value is not None and value.strip():
                    return value.strip()
            return None

        if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
            return cls()
        ratio_text = first("sample_ratio")
        try:
            ratio = 1.0 if ratio_text is None else float(ratio_text)
        except ValueError:
            raise ConfigError("otel_sample_ratio", "not a number") from None
        content = (first("capture_content") or "").lower()
        if content not in _TRUE | _FALSE:
            raise ConfigError("otel_capture_content", "expected true or false")
        return cls(
            endpoint=first("endpoint") or "",
            sample_ratio=ratio,
            service_name=first("service_name") or service_name or _SERVICE_NAME,
            capture_content=content in _TRUE,
        )
