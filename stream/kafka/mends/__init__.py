"""The mends: every override of faust-streaming's, mode-streaming's, aiokafka's and
rocksdict's internals, and of the embedded broker's behaviour, in one room.

Its one index is ``docs/upstream/README.md``: for each mend, what it patches, why, the test
that reproduces the defect, the upstream issue (or our report, ready to file) and the version
it was read against. ``library_versions.py`` refuses, at start, versions other than those
read; ``tests/kafka/test_upstream_fingerprints.py`` fails when the upstream code under a mend
changed, and when a file outside this room overrides upstream code.

- The transport (``consumer.py``, registered as ``kafka://``; ``tansu.py`` for the embedded
  broker, ``tansu://``): mends 1-11 of the consumer and producer, in ``consumer_thread.py``,
  ``delivery.py``, ``continuity.py``, ``commits.py``, ``membership.py``, ``fetch_loop.py``,
  ``predecessor.py``;
  ``testhooks.py`` their test-only hooks.
- The tables: ``changelog.py`` (batched changelog writes), ``handover.py`` (record batches
  handed to aiokafka in order), ``tables.py`` (no second's wait at start),
  ``rocksdb_store.py`` and ``snapshot_store.py`` (the stores), ``stale_state.py`` (another
  cluster's tables found before the start).
- What the worker reads of Faust's and aiokafka's state: ``faust_state.py``, ``lag.py``.
- The batched in-order agent's stream: ``manual_stream.py`` (a stream with manual acks read, and its
  records acked, with less per record).
- The rest of the worker: ``monitor.py`` (Faust's per-record bookkeeping), ``partitioning.py``
  (aiokafka's partitioner, cached), ``faust_worker.py`` (Faust's worker: spinner, logging,
  failed starts).
"""
