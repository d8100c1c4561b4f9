"""Faust's table manager without the second it waits at every start.

``TableManager.on_start`` (faust-streaming 0.15) sleeps one second before it subscribes the
tables' changelogs and starts recovery, so that tables declared once the app is running
are registered first; the consumer joins its group only after that. Every table of a
worker is declared before it starts (``worker.build_worker``), so the wait only delays
each start and each restart by a second.
"""

from __future__ import annotations

from faust.tables import TableManager


class PromptTableManager(TableManager):
    """Subscribes the changelogs and starts recovery at once."""

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()
