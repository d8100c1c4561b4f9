"""A settings mistake as the user can act on it: one line per problem, naming the environment
variable as it was set, and never a secret's value.

pydantic reports a field by its Python name and echoes the input it refused (for a model-level
check, every value the model was given, passwords included); pydantic-settings reports a value
that is not JSON by the field's name. Both are turned here into ``ConfigError``, whose problems
read ``KAFKA_SSL_CAFILE: no such file: /x/ca.pem``. Pure: it knows the package's settings
models only as the ``BaseSettings`` subclasses defined under ``stream``.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import AliasChoices, SecretBytes, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsError

from .errors import ConfigError

SECRET_TYPES = (SecretStr, SecretBytes)
SHOWN_INPUT_CHARS = 80  # a longer value is not echoed: the setting's name is enough


def config_error(
    exc: ValidationError | SettingsError, environ: Mapping[str, str] | None = None
) -> ConfigError | None:
    """The settings error ``exc`` as one problem per line; None when it is not about one of
    the package's settings models (then it is a bug, and its traceback is wanted)."""
    environ = os.environ if environ is None else environ
    if isinstance(exc, ValidationError):
        model = _settings_model(exc.title)
        if model is None:
            return None
        return ConfigError([_problem(model, error, environ) for error in exc.errors()])
    return _unreadable(exc, environ)


def env_name(model: type[BaseSettings], field: str, environ: Mapping[str, str]) -> str:
    """The environment variable ``field`` of ``model`` is read from, spelt as the user set it
    (the names are case-insensitive unless the model says otherwise)."""
    info = model.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices):  # the choice the user set, else the first
        names = [c for c in alias.choices if isinstance(c, str)]
        upper = {key.upper() for key in environ}
        alias = next((c for c in names if c.upper() in upper), names[0] if names else None)
    name = alias if isinstance(alias, str) else f"{model.model_config.get('env_prefix', '')}{field}"
    if model.model_config.get("case_sensitive"):
        return name
    return next((key for key in environ if key.upper() == name.upper()), name.upper())


def _settings_models() -> Iterator[type[BaseSettings]]:
    stack: list[type[BaseSettings]] = [BaseSettings]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("stream."):
            yield cls


def _settings_model(title: str) -> type[BaseSettings] | None:
    return next(
        (m for m in _settings_models() if (m.model_config.get("title") or m.__name__) == title),
        None,
    )


def _problem(model: type[BaseSettings], error: Any, environ: Mapping[str, str]) -> str:
    loc: tuple[int | str, ...] = error["loc"]
    # a ValueError raised by a validator: its own words (ours name the settings they check)
    said = str(error["ctx"]["error"]) if error["type"] == "value_error" else _lower(error["msg"])
    if not loc or not isinstance(loc[0], str):  # a check across fields: the input is everything
        return said
    field = _field_named(model, loc[0])
    where = env_name(model, field, environ) + "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:]
    )
    value = error.get("input")
    shown = (
        isinstance(value, str | int | float | bool)
        and not _is_secret(model, field)
        and len(repr(value)) <= SHOWN_INPUT_CHARS
        and error["type"] != "value_error"  # a validator's words already say what was wrong
    )
    return f"{where}: {said}" + (f" (got {value!r})" if shown else "")


def _field_named(model: type[BaseSettings], name: str) -> str:
    """The field pydantic reported as ``name``: an aliased field (``KAFKA_BOOTSTRAP_SERVERS``,
    ``LANGFUSE_SECRET_KEY``) is reported by its alias, which is not a field name."""
    if name in model.model_fields:
        return name
    for field, info in model.model_fields.items():
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        if name in choices:
            return field
    return name


def _unreadable(exc: SettingsError, environ: Mapping[str, str]) -> ConfigError | None:
    """pydantic-settings could not read a value (a JSON setting that is not JSON): its message
    names the field only, in Python spelling."""
    match = re.search(r'field "([^"]+)"', str(exc))
    if match is None:
        return None
    field = match.group(1)
    models = [m for m in _settings_models() if field in m.model_fields]
    if not models:
        return None
    names = [env_name(m, field, environ) for m in models]
    name = next((n for n in names if n in environ), names[0])
    cause = exc.__cause__
    # json's message gives the position, never the text: safe for any setting
    why = f"not valid JSON ({cause})" if cause is not None else "cannot be read"
    return ConfigError([f"{name}: {why}"])


def _is_secret(model: type[BaseSettings], field: str) -> bool:
    info = model.model_fields.get(field)
    return info is not None and _has_secret(info.annotation)


def _has_secret(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, SECRET_TYPES):
        return True
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return False
    return any(_has_secret(arg) for arg in typing.get_args(annotation))


def _lower(message: str) -> str:
    """pydantic's "Input should be ..." reads on after a colon as "input should be ..."."""
    return message[:1].lower() + message[1:] if message[1:2].islower() else message
