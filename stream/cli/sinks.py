"""``scorer sink langfuse|opik``: scores posted where traces are browsed."""

from __future__ import annotations

import asyncio
import logging
import typing
from typing import Annotated

import typer

from ..settings import Settings
from .base import scores_broker, sink_app

IdleOption = Annotated[
    float | None,
    typer.Option("--idle", help="Stop after this many seconds without a score (a backfill)"),
]
LoglevelOption = Annotated[str, typer.Option(help="crit, error, warn, info or debug")]


@sink_app.command("langfuse")
def sink_langfuse(idle: IdleOption = None, loglevel: LoglevelOption = "info") -> None:
    """Post every ok score to Langfuse (LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY,
    LANGFUSE_SECRET_KEY): a trace score on its trace, a thread score on the session of that
    id. Reads the scores topic as consumer group <SCORER_APP_ID>-sink-langfuse; commits
    only what Langfuse accepted."""
    from ..sinks import LangfuseSinkSettings, langfuse_sink

    sink = LangfuseSinkSettings()  # type: ignore[call-arg]  # the keys come from the environment
    _run_sink(lambda **where: langfuse_sink(sink, **where), idle, loglevel)


@sink_app.command("opik")
def sink_opik(idle: IdleOption = None, loglevel: LoglevelOption = "info") -> None:
    """Post every ok score to Opik as a feedback score (OPIK_URL_OVERRIDE, default a local
    Opik; OPIK_API_KEY and OPIK_WORKSPACE for Comet's cloud): a trace score on its trace, a
    thread score on the thread of that id. Reads the scores topic as consumer group
    <SCORER_APP_ID>-sink-opik; commits only what Opik accepted."""
    from ..sinks import OpikSinkSettings, opik_sink

    sink = OpikSinkSettings()
    _run_sink(lambda **where: opik_sink(sink, **where), idle, loglevel)


def _run_sink(build: typing.Callable[..., typing.Any], idle: float | None, loglevel: str) -> None:
    """The broker as `scorer replay` finds it, then the sink until Ctrl-C, SIGTERM or idle."""
    import signal

    from ..kafka.io import check_cluster

    logging.basicConfig(
        level=loglevel.upper().replace("WARN", "WARNING").replace("CRIT", "CRITICAL"),
        format="%(asctime)s %(levelname)s %(message)s",
    )
    settings = Settings()
    bootstrap, security = scores_broker(settings)
    sink = build(
        bootstrap=bootstrap, topic=settings.scores_topic, app_id=settings.app_id, security=security
    )

    async def run() -> None:
        await check_cluster(bootstrap, security)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await sink.run(stop, idle)

    asyncio.run(run())
