"""A secured development broker: SASL_SSL, SCRAM-SHA-512 users and ACLs enforced.

Owns :class:`SecureBrokerFiles` (the self-signed TLS certificate made at run
time with the JDK's ``keytool``, and the PEM clients trust it by) and
:func:`secure_broker_settings`, the :class:`~turnstream.devbroker.settings.
BrokerSettings` of a broker that

* serves clients only on a ``SASL_SSL`` listener (certificate for
  ``IP:127.0.0.1`` only, so ``localhost`` is a hostname mismatch), SCRAM-SHA-512;
* authorises with ``StandardAuthorizer`` and ``allow.everyone.if.no.acl.found=
  false``: a principal may do only what an ACL grants;
* knows the SCRAM users given (formatted into its metadata, so they exist at
  first start), one of them the super user ``admin`` that applies the ACLs;
* talks to its own controller over SASL_PLAINTEXT/PLAIN as ``admin`` (no
  anonymous super user anywhere).

Passwords are written only to owner-readable files (the keystore's through
``keytool -storepass:env``, the users' through a java ``@argfile``), never to
a process's arguments. Stdlib only; must not import aiokafka.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from turnstream.devbroker.errors import BrokerError
from turnstream.devbroker.settings import BrokerSettings

__all__ = [
    "ADMIN_USER",
    "SCRAM_MECHANISM",
    "CertificateError",
    "SecureBrokerFiles",
    "make_certificate",
    "secure_broker_settings",
]

ADMIN_USER: Final = "admin"
SCRAM_MECHANISM: Final = "SCRAM-SHA-512"
_STORE_ENV: Final = "TURNSTREAM_DEVBROKER_STORE_PASSWORD"
_KEYTOOL_TIMEOUT_S: Final = 60.0


class CertificateError(BrokerError):
    """``keytool`` could not make the broker's certificate."""

    kind = "certificate_failed"

    def __init__(self, step: str, output: str) -> None:
        self.step = step
        super().__init__(f"keytool {step} failed: {output.strip()[-400:]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SecureBrokerFiles:
    """The TLS material of one secured broker.

    Attributes:
        keystore: the broker's PKCS12 keystore (key and certificate).
        truststore: the certificate alone, trusted (the broker's own clients).
        ca_file: the certificate in PEM, for clients' ``--ssl-cafile``.
        store_password: the keystore's password (hidden from ``repr``).
    """

    keystore: Path
    truststore: Path
    ca_file: Path
    store_password: str = field(repr=False)


def _keytool(java: str) -> str:
    sibling = Path(java).resolve().parent / "keytool"
    if os.access(sibling, os.X_OK):
        return str(sibling)
    found = shutil.which("keytool")
    if found is None:
        raise CertificateError("lookup", "no keytool next to java or on PATH")
    return found


def make_certificate(
    java: str, directory: Path, *, host: str, env: Mapping[str, str]
) -> SecureBrokerFiles:
    """Make a self-signed broker certificate for ``host`` (an IP) and its PEM.

    Raises:
        CertificateError: keytool failed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    keystore, ca_file = directory / "broker.p12", directory / "ca.pem"
    truststore = directory / "trust.p12"
    keystore.unlink(missing_ok=True)
    truststore.unlink(missing_ok=True)
    password = secrets.token_hex(16)
    tool = _keytool(java)
    common = ["-keystore", str(keystore), "-storepass:env", _STORE_ENV]
    trust = ["-keystore", str(truststore), "-storepass:env", _STORE_ENV]
    steps = {
        "genkeypair": [
            "-genkeypair",
            "-alias",
            "broker",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-validity",
            "7",
            "-dname",
            f"CN={host}",
            "-ext",
            f"SAN=ip:{host}",
            "-storetype",
            "PKCS12",
        ],
        "exportcert": [
            "-exportcert",
            "-rfc",
            "-alias",
            "broker",
            "-file",
            str(ca_file),
            *common,
        ],
        "importcert": [
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-file",
            str(ca_file),
            "-storetype",
            "PKCS12",
            *trust,
        ],
    }
    steps["genkeypair"] += common
    for step, args in steps.items():
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [tool, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_KEYTOOL_TIMEOUT_S,
            check=False,
            env={**env, _STORE_ENV: password},
        )
        if result.returncode != 0:
            raise CertificateError(step, result.stdout + result.stderr)
    return SecureBrokerFiles(
        keystore=keystore,
        truststore=truststore,
        ca_file=ca_file,
        store_password=password,
    )


def _jaas(module: str, user: str, password: str, *, users: bool = False) -> str:
    extra = f' user_{user}="{password}"' if users else ""
    return f'{module} required username="{user}" password="{password}"{extra};'


def secure_broker_settings(
    base: BrokerSettings,
    files: SecureBrokerFiles,
    *,
    users: Mapping[str, str],
) -> BrokerSettings:
    """``base`` turned into a SASL_SSL + SCRAM + ACL broker (see module docstring).

    Args:
        base: layout and ports (its state dir must be its own).
        files: the TLS material from :func:`make_certificate`.
        users: SCRAM users by name, passwords as values; must hold ``admin``.
    """
    admin_password = users[ADMIN_USER]
    host, port, controller = base.host, base.client_port, base.controller_port
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    props = (
        ("listeners", f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller}"),
        ("advertised.listeners", f"SASL_SSL://{host}:{port}"),
        (
            "listener.security.protocol.map",
            "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ("inter.broker.listener.name", "SASL_SSL"),
        ("sasl.enabled.mechanisms", SCRAM_MECHANISM),
        ("sasl.mechanism.inter.broker.protocol", SCRAM_MECHANISM),
        (
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
            _jaas(scram, ADMIN_USER, admin_password),
        ),
        ("sasl.mechanism.controller.protocol", "PLAIN"),
        ("listener.name.controller.sasl.enabled.mechanisms", "PLAIN"),
        (
            "listener.name.controller.plain.sasl.jaas.config",
            _jaas(plain, ADMIN_USER, admin_password, users=True),
        ),
        ("ssl.keystore.type", "PKCS12"),
        ("ssl.keystore.location", str(files.keystore)),
        ("ssl.keystore.password", files.store_password),
        ("ssl.key.password", files.store_password),
        ("ssl.truststore.type", "PKCS12"),
        ("ssl.truststore.location", str(files.truststore)),
        ("ssl.truststore.password", files.store_password),
        ("ssl.client.auth", "none"),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("allow.everyone.if.no.acl.found", "false"),
        ("super.users", f"User:{ADMIN_USER}"),
    )
    return replace(
        base,
        extra_properties=(*base.extra_properties, *props),
        scram_users=tuple(
            (SCRAM_MECHANISM, name, password) for name, password in users.items()
        ),
    )
