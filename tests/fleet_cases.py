"""Issue 48's fleet on the virtual clock: several judge clients (a worker's each) against one
provider account, sharing their pace through pace boards as the workers do through the
``APP-judge-pace`` topic (``kafka/pace_topic.py``), here a bus that hands each record to the
other workers' boards after ``BUS_DELAY_S`` (a record's trip through the broker).

Each worker gets every ``workers``-th call of the case (the consumer group's partitions);
``leave`` stops one worker's publishing and calling part-way, its calls left to the others,
as a killed worker's partitions go to the rest of its group.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import httpx
from pacing_cases import Case, Figures, client_settings, figures, judge_rule, make_sim, sim_options
from virtual_time import run_virtual

from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.judge.fleet import PUBLISH_S, Fleet, PaceBoard, account_of
from stream.judge.openai_api import OpenAIChatAPI

BUS_DELAY_S = 0.2


@dataclass
class Worker:
    name: str
    client: JudgeClient
    fleet: Fleet
    alive: bool = True


def run_fleet(case: Case, workers: int, *, leave_at: float | None = None) -> Figures:
    """``case``'s calls judged by ``workers`` clients sharing one account; with ``leave_at``,
    the last worker stops then (no tombstone: killed) and its calls not yet started go to the
    others."""

    async def main() -> Figures:
        loop = asyncio.get_running_loop()
        sim = make_sim(sim_options(case), clock=loop.time)
        config = client_settings().judge_config()
        account = account_of(config.base_url, "sk-test")
        crew: list[Worker] = []
        for n in range(workers):
            api = OpenAIChatAPI(
                base_url=config.base_url,
                api_key="sk-test",
                timeout_s=config.timeout_s,
                http_client=httpx.AsyncClient(transport=sim.transport()),
            )
            client = JudgeClient(config, api=api, clock=loop.time, jitter=random.Random(n))
            board = PaceBoard(f"worker-{n}")
            board.reading = True
            client.fleet = Fleet(board, account, wall=loop.time)
            crew.append(Worker(board.worker, client, client.fleet))

        def publish(worker: Worker) -> None:
            if not worker.alive:
                return
            for record in worker.fleet.tick():
                value = record.to_bytes()
                for other in crew:
                    if other is not worker:
                        loop.call_later(BUS_DELAY_S, other.fleet.board.heard, record.key, value)
            loop.call_later(PUBLISH_S, publish, worker)

        for worker in crew:
            loop.call_soon(publish, worker)

        rule = judge_rule()
        model = rule.judge.model or config.model
        rule = rule.model_copy(update={"judge": rule.judge.model_copy(update={"model": model})})
        gate = asyncio.Semaphore(case.in_flight)
        errors = 0
        started = loop.time()

        async def one(i: int, prompt: str) -> None:
            nonlocal errors
            if case.rate:
                await asyncio.sleep(i / case.rate)
            async with gate:
                owner = crew[i % workers]
                if not owner.alive:
                    owner = crew[i % (workers - 1)]
                try:
                    await owner.client.judge(rule, prompt)
                except JudgeError:
                    errors += 1

        def leave() -> None:
            crew[-1].alive = False

        if leave_at is not None:
            loop.call_later(leave_at, leave)
        try:
            await asyncio.gather(*(one(i, p) for i, (_, p) in enumerate(case.prompts())))
        finally:
            for worker in crew:
                worker.alive = False
                await worker.client.close()
        seconds = loop.time() - started
        return figures(sim, seconds, errors, float("nan"))

    return run_virtual(main)
