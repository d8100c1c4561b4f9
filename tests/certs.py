"""A throwaway certificate authority and a server certificate signed by it (openssl, offline)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_certs(directory: Path, names: str = "DNS:kafka.internal,IP:127.0.0.1") -> dict[str, Path]:
    """``ca`` (PEM), and ``server`` / ``key`` for the subject alternative ``names``."""
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    key = ("-newkey", "rsa:2048", "-nodes")
    run("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test-ca")
    run("req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kafka")
    (directory / "ext.cnf").write_text(f"subjectAltName={names}\n")
    run(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
    )  # fmt: skip
    return {
        "ca": directory / "ca.pem",
        "server": directory / "server.pem",
        "key": directory / "server.key",
    }
