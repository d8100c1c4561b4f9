"""How every Kafka client of the project reaches a secured cluster: TLS, SASL, or both.

Read from the environment under the conventional names (``KAFKA_SECURITY_PROTOCOL``,
``KAFKA_SASL_MECHANISM``, ``KAFKA_SASL_USERNAME``, ``KAFKA_SASL_PASSWORD``,
``KAFKA_SSL_CAFILE``, ``KAFKA_SSL_CERTFILE``, ``KAFKA_SSL_KEYFILE``...), never from a file in
the repository. One object gives Faust's credentials (``faust_credentials``) and, translated by
Faust's own code, the options of a plain aiokafka client (``client_options``), so the worker, the output producer, the lag meter,
`scorer replay`, `scorer demo` against a cluster and the example consumer all connect the
same way. The password is a ``SecretStr``: it is not in ``repr``, logs or ``describe()``.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..errors import ConfigError

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


class StaticToken:
    """An OAUTHBEARER token provider (aiokafka's interface) for a token given in the
    environment; a token that expires needs a provider of your own."""

    def __init__(self, token: SecretStr) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token.get_secret_value()

    def extensions(self) -> dict[str, str]:
        return {}


class KafkaSecurity(BaseSettings):
    """The cluster's security settings (``KAFKA_*``)."""

    model_config = SettingsConfigDict(env_prefix="KAFKA_", extra="ignore")

    security_protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_oauth_token: SecretStr | None = Field(
        default=None, description="OAUTHBEARER: a token (static; for the token's lifetime)"
    )
    ssl_cafile: Path | None = Field(default=None, description="CA bundle (PEM); default: system")
    ssl_certfile: Path | None = Field(default=None, description="client certificate (PEM)")
    ssl_keyfile: Path | None = Field(default=None, description="client key (PEM)")
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        if path is None or (path.is_file() and os.access(path, os.R_OK)):
            return path
        if not path.exists():
            raise ValueError(f"no such file: {path}")
        raise ValueError(f"{path} is not a file" if not path.is_file() else f"cannot read {path}")

    @model_validator(mode="after")
    def _complete(self) -> KafkaSecurity:
        if self.sasl:
            if self.sasl_mechanism == "OAUTHBEARER":
                if self.sasl_oauth_token is None:
                    raise ValueError(
                        "KAFKA_SASL_MECHANISM=OAUTHBEARER needs KAFKA_SASL_OAUTH_TOKEN"
                    )
            elif missing := [
                name
                for name, given in (
                    ("KAFKA_SASL_USERNAME", bool(self.sasl_username)),
                    ("KAFKA_SASL_PASSWORD", self.sasl_password is not None),
                )
                if not given
            ]:
                raise ValueError(
                    f"KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs "
                    f"{' and '.join(missing)} (KAFKA_SASL_MECHANISM={self.sasl_mechanism})"
                )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError(
                "a client certificate needs both KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE"
            )
        return self

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (server verified against the CA file, or the system's CAs)."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None
            )
        except ssl.SSLError as exc:
            raise ConfigError(
                [f"KAFKA_SSL_CAFILE: {self.ssl_cafile} holds no PEM certificate ({exc.reason})"]
            ) from None
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile and self.ssl_keyfile:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            try:
                context.load_cert_chain(str(self.ssl_certfile), str(self.ssl_keyfile), password)
            except ssl.SSLError as exc:  # its text is OpenSSL's, never the password
                raise ConfigError(
                    [
                        f"KAFKA_SSL_CERTFILE, KAFKA_SSL_KEYFILE: cannot load the client "
                        f"certificate {self.ssl_certfile} with its key {self.ssl_keyfile} "
                        f"({exc.reason or exc}): PEM files of one pair, and "
                        "KAFKA_SSL_KEY_PASSWORD if the key is encrypted"
                    ]
                ) from None
        return context

    def faust_credentials(self) -> CredentialsT | None:
        """Faust's form of these settings (None: plaintext)."""
        import faust

        if self.security_protocol == "PLAINTEXT":
            return None
        context = self.ssl_context()
        if not self.sasl:
            assert context is not None
            return faust.SSLCredentials(context)
        if self.sasl_mechanism == "OAUTHBEARER":
            assert self.sasl_oauth_token is not None
            return faust.OAuthCredentials(
                oauth_cb=StaticToken(self.sasl_oauth_token), ssl_context=context
            )
        assert self.sasl_password is not None
        return faust.SASLCredentials(
            username=self.sasl_username,
            password=self.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=self.sasl_mechanism,
        )

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer and admin client: Faust's own
        translation of ``faust_credentials``, so every client connects as the worker does."""
        from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

        return dict(credentials_to_aiokafka_auth(self.faust_credentials()))

    def describe(self) -> str:
        """For logs: the protocol, mechanism and user, never a secret."""
        parts: list[str] = [self.security_protocol]
        if self.sasl:
            who = f" as {self.sasl_username}" if self.sasl_username else ""
            parts.append(f"{self.sasl_mechanism}{who}")
        if self.tls:
            parts.append(f"CA {self.ssl_cafile or 'system'}")
            if self.ssl_certfile:
                parts.append(f"client certificate {self.ssl_certfile}")
        return ", ".join(parts)
