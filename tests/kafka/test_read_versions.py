"""The libraries whose internals ``stream/kafka/`` overrides are the versions the overrides
were read against (``stream/kafka/consumer.py``'s index of mends, ``rocksdb_store.py``): a
newer release can change ``_drain_messages``, ``_commit_offsets``, ``_send_req`` or
``_db_for_partition`` under a mend, and the failure would be a lost record, not an error. A
version bump fails here until the mends are read again and this list says so."""

from __future__ import annotations

from importlib.metadata import version

import pytest

READ_AGAINST = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "rocksdict": "0.3.29"}


@pytest.mark.parametrize("package", sorted(READ_AGAINST))
def test_the_installed_version_is_the_one_the_mends_were_read_against(package: str) -> None:
    assert version(package) == READ_AGAINST[package], (
        f"{package} {version(package)} is installed; stream/kafka/ was read against "
        f"{READ_AGAINST[package]}: read the mends against it, then update READ_AGAINST"
    )
