"""A real `redis-server` on 127.0.0.1 for tests of a bot on `RedisStopRegistry` (SPEC N).

The `redis-server` binary must be on PATH (Debian's package `redis-server`; cordstream's own
`make test` installs it when the machine has none). `redis_server()` starts one without
persistence, on a free port, in a folder of its own, and stops it; `RedisServer.url` reaches
it, `restart()` stops it and starts it again on the same port (everything in it is lost).

    with redis_server() as server:
        async with RedisStopRegistry(server.url) as stops: ...
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """One `redis-server` process; `url` reaches it."""

    def __init__(self, folder: Path) -> None:
        found = shutil.which("redis-server")
        if found is None:
            raise RuntimeError(
                "no redis-server on PATH: `make test` installs it (apt redis-server)"
            )
        self.binary = found
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)),
                *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10.0
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A `redis-server` for the block's duration (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="cordstream-redis-") as folder:
        server = RedisServer(Path(folder))
        server.start()
        try:
            yield server
        finally:
            server.stop()
