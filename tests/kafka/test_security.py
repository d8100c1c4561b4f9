"""The cluster's TLS / SASL settings: read from KAFKA_*, given to every client, secrets kept
out of sight; a broker that cannot be trusted or reached fails the start at once."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import faust
import pytest
from certs import make_certs
from faust.types.auth import AuthProtocol, SASLMechanism
from pydantic import ValidationError

from stream.errors import ScorerError
from stream.kafka.broker import free_port
from stream.kafka.io import check_cluster
from stream.kafka.security import KafkaSecurity

SECRET = "s3cr3t-scram-password"


@pytest.fixture
def tls(tmp_path: Path) -> dict[str, Path]:
    return make_certs(tmp_path)  # for 127.0.0.1 and kafka.internal


@pytest.fixture(autouse=True)
def no_kafka_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("KAFKA_")]:
        monkeypatch.delenv(name)


def test_plaintext_by_default() -> None:
    security = KafkaSecurity()
    assert security.client_options() == {"security_protocol": "PLAINTEXT"}
    assert security.faust_credentials() is None


def test_sasl_over_tls_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tls: dict[str, Path]
) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("KAFKA_SASL_USERNAME", "scorer")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("KAFKA_SSL_CAFILE", str(tls["ca"]))
    security = KafkaSecurity()
    options = security.client_options()
    context = options.pop("ssl_context")
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "scorer",
        "sasl_plain_password": SECRET,
    }
    credentials = security.faust_credentials()
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol is AuthProtocol.SASL_SSL
    assert credentials.mechanism is SASLMechanism.SCRAM_SHA_512
    # the password is nowhere a log line or an error could show it
    for shown in (repr(security), str(security), security.describe()):
        assert SECRET not in shown
    assert security.describe() == f"SASL_SSL, SCRAM-SHA-512 as scorer, CA {tls['ca']}"


def test_tls_alone_and_a_client_certificate(tls: dict[str, Path]) -> None:
    security = KafkaSecurity(
        security_protocol="SSL",
        ssl_cafile=tls["ca"],
        ssl_certfile=tls["server"],
        ssl_keyfile=tls["key"],
        ssl_check_hostname=False,
    )
    options = security.client_options()
    assert set(options) == {"security_protocol", "ssl_context"}
    assert not options["ssl_context"].check_hostname
    assert isinstance(security.faust_credentials(), faust.SSLCredentials)


def test_oauthbearer_takes_a_token_from_the_environment() -> None:
    security = KafkaSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", sasl_oauth_token="t0k"
    )
    provider = security.client_options()["sasl_oauth_token_provider"]
    assert asyncio.run(provider.token()) == "t0k"
    assert isinstance(security.faust_credentials(), faust.OAuthCredentials)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"security_protocol": "SASL_SSL"}, "needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u"}, "KAFKA_SASL_PASSWORD"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "needs KAFKA_SASL_OAUTH_TOKEN",
        ),
        ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "no such file"),
        ({"security_protocol": "SSL", "ssl_certfile": "/etc/hostname"}, "KAFKA_SSL_KEYFILE"),
        ({"security_protocol": "TLS"}, "security_protocol"),
    ],
)
def test_incomplete_settings_say_what_is_missing(settings: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        KafkaSecurity(**settings)


async def serve_tls(tls: dict[str, Path]) -> tuple[asyncio.Server, int]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls["server"], tls["key"])

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    port = free_port()
    return await asyncio.start_server(hang_up, "127.0.0.1", port, ssl=context), port


async def test_an_untrusted_broker_certificate_fails_the_start_and_says_so(
    tls: dict[str, Path],
) -> None:
    server, port = await serve_tls(tls)
    async with server:
        system_cas = KafkaSecurity(security_protocol="SSL")  # the test CA is not among them
        with pytest.raises(ScorerError, match=r"certificate is not trusted.*KAFKA_SSL_CAFILE"):
            await asyncio.wait_for(check_cluster(f"127.0.0.1:{port}", system_cas, 5), 10)
        wrong_name = KafkaSecurity(security_protocol="SSL", ssl_cafile=tls["ca"])
        with pytest.raises(ScorerError, match=r"does not name this host.*KAFKA_SSL_CHECK_HOSTNAME"):
            await check_cluster(f"localhost:{port}", wrong_name, 5)  # not in the certificate


async def test_an_unreachable_broker_fails_the_start_in_seconds() -> None:
    port = free_port()  # nothing listens
    with pytest.raises(ScorerError, match=rf"127.0.0.1:{port} .*cannot connect"):
        await asyncio.wait_for(check_cluster(f"127.0.0.1:{port}", None, 3), 10)
