"""Test hooks of the mended consumer and producer, read from the environment: off by
default, for tests and chaos runs only; never set them in a deployment."""

from __future__ import annotations

import os

# widen the window between the seek to committed offsets and the end of a rebalance (mend 2);
# make each changelog write wait before it reaches the producer (mend 5); cap the producer's
# batches (1: a record per batch, so that the embedded broker's defective end offsets are
# right, and table recovery works on ``kafka://`` against it)
SEEK_DELAY_ENV = "SCORER_TEST_SEEK_DELAY_S"
CHANGELOG_DELAY_ENV = "SCORER_TEST_CHANGELOG_DELAY_S"
PRODUCER_BATCH_ENV = "SCORER_TEST_PRODUCER_BATCH_BYTES"
# give ``kafka://`` the embedded broker's gap patience (mend 3): that broker serves a later
# batch before an earlier one, which can still be unwritten when one quick refetch reads it
GAP_PATIENCE_ENV = "SCORER_TEST_GAP_PATIENCE_S"


def delay_from_env(name: str) -> float:
    """The delay in seconds a test set in ``name`` (0: none)."""
    return float(os.environ.get(name) or 0)


def producer_batch_cap() -> int | None:
    """The producer's largest batch in bytes, when a test caps it."""
    value = os.environ.get(PRODUCER_BATCH_ENV)
    return int(value) if value else None
