"""Faust's RocksDB store, reading a table of raw bytes as it is.

Faust's stores decode every key and value they yield through the app's serializers
(``SerializedStore._items_decoded``, faust-streaming 0.15), about 4 µs an item here even
when both codecs are ``raw`` and decoding returns the bytes it was given. The worker's tables
are raw (``app.raw_table``), and a recovery reads every thread of the table to rebuild its
index: 100 000 threads cost 0.4 s of the restart in decoding alone. This store yields what
RocksDB holds when both codecs are raw, and decodes as Faust does otherwise.

Faust's store also runs a full garbage collection at every rebalance of every table, to let
go of the databases of revoked partitions (it drops them without closing them); with nothing
revoked, at a worker's first assignment, there is nothing to let go of, and six tables'
collections held a start's recovery back by up to a second or more. It runs only when a
partition of the table was revoked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from faust.stores import STORES
from faust.stores.rocksdb import Store
from faust.types import TP, CollectionT

SCHEME = "rocksdb-raw"


class RawRocksStore(Store):
    """Faust's RocksDB store, its raw tables read without a decode per item."""

    def _raw(self) -> bool:
        return self.key_serializer == "raw" and self.value_serializer == "raw"

    def _items_decoded(self) -> Iterator[tuple[Any, Any]]:
        return self._iteritems() if self._raw() else super()._items_decoded()

    def _keys_decoded(self) -> Iterator[Any]:
        return self._iterkeys() if self._raw() else super()._keys_decoded()

    def _values_decoded(self) -> Iterator[Any]:
        return self._itervalues() if self._raw() else super()._values_decoded()

    def revoke_partitions(self, table: CollectionT, tps: set[TP]) -> None:
        """Faust's, with its garbage collection only when a database was let go of."""
        if any(tp.topic in table.changelog_topic.topics for tp in tps):
            super().revoke_partitions(table, tps)


STORES.aliases[SCHEME] = f"{__name__}:RawRocksStore"
