"""The worker and its clients against a TLS-secured broker: the embedded broker behind a
TLS-terminating proxy (Debian's stunnel; Tansu 0.6's own TLS listener does not answer TLS
here), advertising the proxy, so every connection a client makes is TLS."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from certs import make_certs
from fixtures import live_trace

from stream.kafka.broker import EmbeddedBroker, free_port
from stream.kafka.io import ensure_topics, produce, reader
from stream.kafka.security import KafkaSecurity

from .harness import Names, Worker

TLS = {"SCORER_PACKS": '["fretcoach"]'}


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    certs = make_certs(tmp_path / "certs")
    port = free_port()
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log", advertised=port).start()
    conf = tmp_path / "stunnel.conf"
    conf.write_text(
        f"foreground = yes\npid =\n[kafka]\naccept = 127.0.0.1:{port}\n"
        f"connect = 127.0.0.1:{broker.port}\ncert = {certs['server']}\nkey = {certs['key']}\n"
    )
    log = open(tmp_path / "stunnel.log", "wb")  # noqa: SIM115 - owned by the proxy
    proxy = subprocess.Popen(["stunnel4", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"127.0.0.1:{port}", certs
    proxy.terminate()
    proxy.wait(10)
    broker.stop()


def tls_env(ca: Path) -> dict[str, str]:
    return {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": str(ca), **TLS}


async def test_a_worker_scores_over_tls(
    tls_broker: tuple[str, dict[str, Path]], workers: list[Worker], tmp_path: Path
) -> None:
    bootstrap, certs = tls_broker
    names = Names()
    security = KafkaSecurity(security_protocol="SSL", ssl_cafile=certs["ca"])
    await ensure_topics(bootstrap, [names.traces, names.scores], 4, security)
    worker = Worker(bootstrap, names, tmp_path, **tls_env(certs["ca"])).start()
    workers.append(worker)
    trace = live_trace()
    trace["id"] = "t-over-tls"
    await produce(bootstrap, names.traces, [trace], security=security)
    found: list[dict] = []
    async with reader(bootstrap, names.scores, security) as consumer:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not found:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [orjson.loads(r.value) for r in records]
    assert found and {s["target_id"] for s in found} == {"t-over-tls"}
    assert "Kafka at 127.0.0.1" in worker.log() and "SSL, CA" in worker.log()


async def test_an_untrusted_broker_certificate_stops_the_worker_at_once(
    tls_broker: tuple[str, dict[str, Path]], workers: list[Worker], tmp_path: Path
) -> None:
    bootstrap, _ = tls_broker
    other_ca = make_certs(tmp_path / "other")["ca"]  # not the CA that signed the broker's
    worker = Worker(bootstrap, Names(), tmp_path, **tls_env(other_ca)).start()
    workers.append(worker)
    assert worker.process is not None
    started = time.monotonic()
    code = await asyncio.to_thread(worker.process.wait, 30)
    assert (code, time.monotonic() - started < 20) == (2, True)
    said = " ".join(worker.log().split())  # the console wraps long lines (long tmp paths)
    assert "TLS certificate is not trusted" in said
    assert "KAFKA_SSL_CAFILE" in said
