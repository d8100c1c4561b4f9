"""How fast a worker given a cluster it cannot use stops, and what it says (issue 15: "wrong
credentials or an untrusted certificate fail start-up within seconds").

Runs ``scorer worker`` as a user does, against: a TLS listener whose certificate no trusted CA
signed, the same listener reached by a name its certificate does not carry, and a port where
nothing listens. Prints the exit code, the wall time from launch to exit (Python start-up and
rule loading included) and the line that says why. SASL failures cannot be produced here (see
docs/operations.md, "Secured clusters"): no broker with users can be run on this machine.

    python bench/startup_check.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from certs import make_certs

from stream.kafka.broker import free_port


def serve_tls(certs: dict[str, Path], port: int) -> None:
    """A TLS listener in a background thread: it completes handshakes, then hangs up."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs["server"], certs["key"])

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(hang_up, "127.0.0.1", port, ssl=context)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()


def run_worker(env: dict[str, str]) -> tuple[int, float, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "SCORER_"))}
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "stream.cli", "worker"],
        env={**clean, "SCORER_PACKS": '["fretcoach"]', **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    said = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return result.returncode, elapsed, said[-1] if said else ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(Path(tmp) / "certs", names="DNS:kafka.internal,IP:127.0.0.1")
        port = free_port()
        serve_tls(certs, port)
        time.sleep(0.5)
        tls = {"KAFKA_SECURITY_PROTOCOL": "SSL"}
        cases = {
            "untrusted certificate": {**tls, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"},
            "certificate for another host": {
                **tls,
                "KAFKA_SSL_CAFILE": str(certs["ca"]),
                "KAFKA_BOOTSTRAP_SERVERS": f"localhost:{port}",
            },
            "nothing listening": {"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"},
        }
        print(f"{'case':30} {'exit':>4} {'min s':>6} {'median s':>8} {'max s':>6}  says")
        for name, env in cases.items():
            runs = [run_worker(env) for _ in range(args.runs)]
            times = [elapsed for _, elapsed, _ in runs]
            codes = {code for code, _, _ in runs}
            said = runs[-1][2][:110]
            print(
                f"{name:30} {'/'.join(map(str, sorted(codes))):>4} {min(times):6.2f} "
                f"{statistics.median(times):8.2f} {max(times):6.2f}  {said}"
            )


if __name__ == "__main__":
    main()
