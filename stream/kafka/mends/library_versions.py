"""The library versions the mends were read against, and the start's check of them.

This room (``stream/kafka/mends/``, its index ``docs/upstream/README.md``) overrides internals
of faust-streaming (and its mode-streaming), aiokafka and rocksdict. ``pyproject.toml`` pins
them to the minor versions below; an environment can still hold another (an install that ignored the
pins, a vendored copy), and a mend over changed code fails as a lost record, not an error.
So a worker refuses to start on another version, in one line naming the tested ones, unless
the operator says so (``SCORER_ALLOW_UNTESTED_LIBRARIES=true``: it starts, with a warning).
``tests/kafka/test_read_versions.py`` holds the pins and this table equal, and
``tests/kafka/test_upstream_fingerprints.py`` the overridden code to what was read.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from ...errors import ConfigError

log = logging.getLogger(__name__)

# distribution -> the version the mends were read against; a release of the same minor is
# accepted (the fingerprint test reads its code before a pin moves)
READ_AGAINST = {
    "faust-streaming": "0.15.3",
    "mode-streaming": "0.7.1",  # Faust's services, its worker and flow control
    "aiokafka": "0.14.0",
    "rocksdict": "0.3.29",
}


def minor(text: str) -> tuple[int, ...]:
    """A version's major and minor (``0.15.3`` -> ``(0, 15)``)."""
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def untested() -> list[str]:
    """Each installed library of ``READ_AGAINST`` at another minor, or before the version
    read (a missing one: a store not installed, left to its own error), said in words."""
    found = []
    for name, read in READ_AGAINST.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue
        numbers = tuple(int(p) for p in installed.split(".")[:3] if p.isdigit())
        read_numbers = tuple(int(p) for p in read.split(".")[:3])
        if minor(installed) != minor(read) or numbers < read_numbers:
            found.append(f"{name} {installed} (read against {read}, tested {minor_range(read)})")
    return found


def minor_range(read: str) -> str:
    major, minor_ = minor(read)
    return f">={read},<{major}.{minor_ + 1}"


def check_libraries(allow_untested: bool, setting: str = "SCORER_ALLOW_UNTESTED_LIBRARIES") -> None:
    """Stop the start on a library version the mends were not read against (one line);
    with ``allow_untested``, warn and go on."""
    found = untested()
    if not found:
        return
    said = "; ".join(found)
    if allow_untested:
        log.warning("untested library versions, started anyway (%s=true): %s", setting, said)
        return
    raise ConfigError(
        [
            f"untested library versions: {said}: install the tested ones "
            f"(pip install '.' resolves them), or set {setting}=true to start anyway"
        ]
    )
