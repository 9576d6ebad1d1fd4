"""A throwaway Postgres cluster in a temp dir (Debian's ``postgresql`` package).

``initdb`` + ``pg_ctl`` on a Unix socket in the temp dir (no TCP listener),
default durability settings (``fsync`` and ``synchronous_commit`` on). As root
the server runs as the ``postgres`` user (``initdb`` refuses root). The
cluster is stopped and deleted on exit.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError(
        "no initdb: install Debian's postgresql package (apt-get install postgresql)"
    )


@contextlib.contextmanager
def temp_cluster() -> Iterator[str]:
    """Start a cluster; yield its libpq DSN; stop and delete it."""
    bindir = _bindir()
    tmp = Path(tempfile.mkdtemp(prefix="peers-pg-"))
    data = tmp / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(tmp, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = random.randint(20_000, 60_000)
    run = {"capture_output": True, "timeout": 120}
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
            check=True,
            **run,
        )
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-l",
                str(tmp / "server.log"),
                "-o",
                f"-p {port} -k {tmp} -c listen_addresses='' -c max_connections=50",
                "start",
            ],
            check=True,
            **run,
        )
        yield f"host={tmp} port={port} user=postgres dbname=postgres"
    finally:
        if data.exists():
            subprocess.run(
                [
                    *prefix,
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ],
                check=False,
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(tmp, ignore_errors=True)
