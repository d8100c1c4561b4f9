"""One worker process to a data directory.

The RocksDB store opens each partition's database under ``SCORER_DATA_DIR`` with an
exclusive lock, and the memory store writes its snapshots there: two workers sharing one
directory would fight over the locks (Faust retries, then the rebalance fails) or overwrite
each other's snapshots. Faust keeps the tables under ``<data dir>/v1/tables`` whatever the
app's id, so this holds for workers of different apps too. A worker takes a lock on its
data directory at start and keeps it while it runs; a second one fails at once, saying what
to change.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from ..errors import ConfigError

_held: list[IO[str]] = []  # the lock files of this process, open while it runs


def lock_data_dir(data_dir: Path, setting: str = "SCORER_DATA_DIR") -> Path:
    """Lock ``data_dir`` for this process's worker (ConfigError naming the holder's pid when
    another process holds it); the lock file's path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "worker.lock"
    held = open(path, "a+")  # noqa: SIM115 - kept open: the lock lasts as long as the process
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.seek(0)
        holder = held.read().strip() or "unknown"
        held.close()
        raise ConfigError(
            [
                f"{setting}: {data_dir} is in use by another worker (pid {holder}): give each "
                f"worker process its own {setting}"
            ]
        ) from None
    held.seek(0)
    held.truncate()
    held.write(f"{os.getpid()}\n")
    held.flush()
    _held.append(held)
    return path
