"""``FirstBytesListener``: a TCP port that records how clients open a connection.

A client configured for TLS starts with a TLS handshake record (first byte
``0x16``); a plaintext Kafka client starts with a size-prefixed request (first byte
``0x00``). The listener reads the first bytes of every connection and hangs up,
so a test can tell which one a client used without a TLS broker.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TLS_HANDSHAKE", "FirstBytesListener", "first_bytes_listener"]

TLS_HANDSHAKE = 0x16
"""The content type of a TLS handshake record: how a TLS client's first byte reads."""

_POLL = 0.1


class FirstBytesListener:
    """Listens on a loopback port in a thread; records each connection's first bytes.

    Attributes:
        seen: the first bytes of each connection so far (empty if none arrived).
    """

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self._sock.settimeout(_POLL)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self._sock.getsockname()[1]}"

    def first_bytes(self) -> set[int]:
        """The first byte of every connection that sent something."""
        return {data[0] for data in self.seen if data}

    def start(self) -> None:
        """Start accepting."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the port."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.seen.append(conn.recv(16))
                except OSError:
                    self.seen.append(b"")


@contextmanager
def first_bytes_listener() -> Iterator[FirstBytesListener]:
    """A started ``FirstBytesListener``, stopped on exit."""
    listener = FirstBytesListener()
    listener.start()
    try:
        yield listener
    finally:
        listener.stop()
