"""The upstream code under the mends is the code they were written against.

``stream/kafka/mends/`` overrides methods of faust-streaming, mode-streaming and aiokafka,
patches their live objects, rewrites their registries and reads their private attributes (the
room's index: ``docs/upstream/README.md``). A release can change that code under a mend, and the failure
would be a lost record, not an error. ``upstream_fingerprints.json`` holds, for each such
function, method or class (or, for compiled code, the file that stands for it), a fingerprint
of its source as read, and the ``stream/`` files that depend on it. A fingerprint that no longer
matches fails here: the upgrade becomes a deliberate re-read of the mend, never a silent one.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import textwrap
from importlib.metadata import distribution, version
from pathlib import Path
from typing import Any

import pytest

from stream.kafka.mends import library_versions

TABLE = json.loads(Path(__file__).with_name("upstream_fingerprints.json").read_text())
READ_AGAINST: dict[str, str] = TABLE["read_against"]
ENTRIES: list[dict[str, Any]] = TABLE["entries"]
REPO = Path(__file__).resolve().parents[2]


def entry_name(entry: dict[str, Any]) -> str:
    """``dist:module:qualname`` (or ``dist:file``), as the failure and the test id say it."""
    if "file" in entry:
        return f"{entry['dist']}:{entry['file']}"
    return f"{entry['dist']}:{entry['module']}:{entry['qualname'] or '<module>'}"


def resolve(module: str, qualname: str) -> Any:
    """The object ``qualname`` names in ``module`` (the module itself for ""): a class's member
    is looked up in that class's own namespace, so a method moved to a base class is not
    silently taken for the one read; properties, class and static methods and mode's
    service tasks stand for the function under them."""
    target: Any = importlib.import_module(module)
    for part in qualname.split(".") if qualname else ():
        if inspect.isclass(target):
            if part not in vars(target):
                raise LookupError(f"{target.__qualname__} no longer defines {part}")
            target = vars(target)[part]
        else:
            target = getattr(target, part)
    if inspect.isclass(target) or inspect.ismodule(target):
        return target
    for under in ("fget", "__func__", "func", "fun"):  # property, classmethod, cached, task
        target = getattr(target, under, target)
    return target


def source_of(entry: dict[str, Any]) -> str:
    """The text fingerprinted: the object's source, dedented; or the distribution's file."""
    if "file" in entry:
        return Path(str(distribution(entry["dist"]).locate_file(entry["file"]))).read_text()
    return textwrap.dedent(inspect.getsource(resolve(entry["module"], entry["qualname"])))


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("dist", sorted(READ_AGAINST))
def test_the_fingerprints_belong_to_the_installed_version(dist: str) -> None:
    assert version(dist) == READ_AGAINST[dist], (
        f"{dist} {version(dist)} is installed; the fingerprints of upstream_fingerprints.json "
        f"were taken from {READ_AGAINST[dist]}: the entries of {dist} failing below name the "
        "code that changed; re-read the mends against it, then update read_against and them"
    )


def test_the_versions_read_are_the_ones_a_worker_starts_on() -> None:
    """The start's check (``library_versions.READ_AGAINST``) and these fingerprints speak of
    the same versions (mode-streaming, read here too, is pinned only by faust-streaming)."""
    for dist, read in library_versions.READ_AGAINST.items():
        assert READ_AGAINST.get(dist) == read, (dist, READ_AGAINST.get(dist), read)


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_name)
def test_the_upstream_code_under_a_mend_is_the_code_read(entry: dict[str, Any]) -> None:
    dist, name = entry["dist"], entry_name(entry)
    depend = ", ".join(entry["used_by"])
    installed = version(dist)
    assert installed == READ_AGAINST[dist], (
        f"{name}: {dist} {installed} is installed, the fingerprint is of {READ_AGAINST[dist]} "
        f"(depended on by {depend})"
    )
    try:
        now = fingerprint(source_of(entry))
    except (LookupError, AttributeError, ImportError, OSError, TypeError) as exc:
        pytest.fail(
            f"{name} ({entry['why']}) is gone from {dist} {installed} ({exc!r}); "
            f"{depend} depend(s) on it: re-read the mend against the new code, then update "
            "the entry in upstream_fingerprints.json"
        )
    assert now == entry["sha256_16"], (
        f"{name} ({entry['why']}): the library's code for it changed since the mend was read "
        f"(fingerprint {entry['sha256_16']}, now {now}); {depend} depend(s) on it: re-read "
        "the mend against the new code, then update the fingerprint in "
        "upstream_fingerprints.json"
    )


def test_each_entry_names_files_that_exist() -> None:
    """A failure above names the files to re-read: they must be where it says."""
    missing = {
        path for entry in ENTRIES for path in entry["used_by"] if not (REPO / path).is_file()
    }
    assert not missing, f"upstream_fingerprints.json names files that are not there: {missing}"


def test_each_entry_is_listed_once() -> None:
    names = [entry_name(entry) for entry in ENTRIES]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


MENDS = "stream/kafka/mends/"
# files outside the mends' room that rely on upstream code without overriding it: each
# reads, catches or reuses what the entry names, and says why here
RELIES_OUTSIDE = {
    "stream/delivery/acking.py": "acks in offset order because Faust's commit takes the "
    "first run of acked offsets (Consumer._new_offset, faust-streaming #606)",
    "stream/delivery/publisher.py": "builds record batches: relies on aiokafka's partitioner "
    "call and on add_batch waiting for the batch before (through faust_state and handover)",
    "stream/agents/forward.py": "reads Channel.queue (public) for what is fetched and not taken",
    "stream/agents/batch_table.py": "catches PartitionsMismatch (public), relies on the order "
    "of Recovery._resume_streams",
    "stream/agents/batch_jobs.py": "catches PartitionsMismatch (public)",
    "stream/agents/verdict_table.py": "catches PartitionsMismatch (public)",
    "stream/worker.py": "overrides on_shutdown, mode's public callback (Service.stop calls it)",
    "stream/kafka/io.py": "opens an aiokafka connection (aiokafka.conn.create_conn) to check a "
    "cluster",
    "stream/kafka/security.py": "reuses Faust's credentials_to_aiokafka_auth",
}


def test_every_override_is_in_the_mends_room() -> None:
    """What overrides, patches or replaces upstream code lives in ``stream/kafka/mends/``;
    a file elsewhere may only rely on upstream code, and says how in ``RELIES_OUTSIDE``."""
    outside = {
        path: entry_name(entry)
        for entry in ENTRIES
        for path in entry["used_by"]
        if not path.startswith(MENDS) and path not in RELIES_OUTSIDE
    }
    assert not outside, f"move these into {MENDS}, or say in RELIES_OUTSIDE why not: {outside}"


def test_the_mends_index_names_every_module_of_the_room() -> None:
    """``docs/upstream/README.md`` is the room's one index: each module in it is named there."""
    index = (REPO / "docs/upstream/README.md").read_text()
    modules = sorted(p.name for p in (REPO / MENDS).glob("*.py") if p.name != "__init__.py")
    unnamed = [m for m in modules if f"{MENDS}{m}" not in index]
    assert not unnamed, f"docs/upstream/README.md does not name: {unnamed}"
