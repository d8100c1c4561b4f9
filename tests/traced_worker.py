"""``scorer worker`` under tracemalloc, for tests that measure what a worker retains: the same
CLI in the same process, with a sampler thread that, each time a ``*.request`` file appears
in ``$TRACED_WORKER_DIR``, collects garbage and writes the bytes tracemalloc traces now to
the matching ``*.traced`` file (a file, not a signal: Faust's worker owns SIGUSR1 and 2);
with ``TRACED_WORKER_SNAPSHOTS`` set, a ``*.snapshot`` of every allocation beside it.

    PYTHONTRACEMALLOC=1 TRACED_WORKER_DIR=/tmp/x python tests/traced_worker.py [worker args]
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def sample(out: Path) -> None:
    while True:
        time.sleep(0.2)
        for request in sorted(out.glob("*.request")):
            gc.collect()
            current, _ = tracemalloc.get_traced_memory()
            if os.environ.get("TRACED_WORKER_SNAPSHOTS"):  # for a look at what grew
                tracemalloc.take_snapshot().dump(str(request.with_suffix(".snapshot")))
            target = request.with_suffix(".traced")
            target.with_suffix(".tmp").write_text(str(current))
            target.with_suffix(".tmp").replace(target)
            request.unlink()


def main() -> None:
    out = Path(os.environ["TRACED_WORKER_DIR"])
    threading.Thread(target=sample, args=(out,), name="traced-worker", daemon=True).start()
    sys.argv = ["scorer", "worker", *sys.argv[1:]]
    from stream.cli import main as scorer

    scorer()


if __name__ == "__main__":
    main()
