"""Who may call the gateway: bearer tokens, each naming one tenant.

Owns :class:`Tenant` and :class:`Tenants` (parsed from a token file). A tenant's
loops are the loops whose ``session_id`` is the tenant's: the gateway stamps
every command it sends for a tenant with that id (a UUID derived from the
tenant's name), and the loop actor gives a new loop the session id of its first
command, so ownership is recorded in Kafka by the loops themselves. Pure: no
network, no ASGI imports.

The token file has one ``TENANT TOKEN`` pair per line; ``#`` starts a comment.
A tenant may have several tokens (rotation); a token names one tenant. Tokens
are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from turnstream.errors import ConfigError
from turnstream.ids import SessionId

__all__ = ["MIN_TOKEN_LENGTH", "Tenant", "Tenants"]

MIN_TOKEN_LENGTH = 16
"""The shortest token accepted (characters)."""
_NAMESPACE = uuid.UUID("5b0f3c1e-2d4a-4c8e-9a57-6f1e0d2b7c93")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant.

    Attributes:
        name: its name in the token file.
        session_id: the session id its loops carry.
    """

    name: str
    session_id: SessionId

    @classmethod
    def named(cls, name: str) -> Tenant:
        """The tenant called ``name`` (its session id derived from the name)."""
        return cls(name, SessionId(uuid.uuid5(_NAMESPACE, name)))


class Tenants:
    """The token table (see module docstring)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._tokens = [
            (token.encode(), Tenant.named(name)) for token, name in tokens.items()
        ]

    @classmethod
    def parse(cls, text: str, *, source: str = "tokens") -> Tenants:
        """Read ``TENANT TOKEN`` lines.

        Raises:
            ConfigError: a malformed line, a short token, a token given twice,
                or no token at all (the message names the line, never a token).
        """
        tokens: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not _NAME.match(parts[0]):
                raise ConfigError(source, f"line {number}: expected 'TENANT TOKEN'")
            name, token = parts
            if len(token) < MIN_TOKEN_LENGTH:
                raise ConfigError(
                    source,
                    f"line {number}: a token needs {MIN_TOKEN_LENGTH}+ characters",
                )
            if token in tokens:
                raise ConfigError(source, f"line {number}: a token is given twice")
            tokens[token] = name
        if not tokens:
            raise ConfigError(source, "no tokens: nobody could call the gateway")
        return cls(tokens)

    @classmethod
    def load(cls, path: Path) -> Tenants:
        """Read the token file at ``path``.

        Raises:
            ConfigError: it cannot be read, or as :meth:`parse`.
        """
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                "tokens_file", f"cannot read {path}: {exc.strerror}"
            ) from exc
        return cls.parse(text, source=str(path))

    def authenticate(self, token: str) -> Tenant | None:
        """The tenant ``token`` names (``None``: no such token)."""
        given = token.encode()
        found = None
        for known, tenant in self._tokens:  # every entry: no early exit to time
            if hmac.compare_digest(known, given):
                found = tenant
        return found
