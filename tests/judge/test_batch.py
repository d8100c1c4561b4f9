"""The Batch API client against a scripted batch endpoint (tests/batch_double.py): the input
file carries the body the online transport sends, and every job comes back answered or failed
with its reason (an HTTP error, expiry, a failed batch), never lost."""

from __future__ import annotations

import orjson
import pytest
from batch_double import BatchDouble, ItemError
from scripted_judge import MockJudge

from stream.judge.batch import (
    BATCH_KEY,
    BatchAPI,
    BatchInputError,
    BatchJob,
    BatchState,
    ItemAnswered,
    ItemFailed,
    batch_input,
    batch_key,
    job_id,
    read_results,
)
from stream.judge.openai_api import OpenAIChatAPI
from stream.judge.transport import Answered, ChatRequest

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number"}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
    "additionalProperties": False,
}


def request(prompt: str, **fields: object) -> ChatRequest:
    base: dict[str, object] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a strict judge."},
            {"role": "user", "content": prompt},
        ],
        "temperature": 0.0,
        "max_tokens": 256,
        "schema": SCHEMA,
    }
    return ChatRequest(**(base | fields))  # type: ignore[arg-type]


def jobs(count: int) -> list[BatchJob]:
    return [
        BatchJob(
            job_id(f"rule-a/trace-{n}", request(f"judge trace {n}")), request(f"judge trace {n}")
        )
        for n in range(count)
    ]


async def run_to_end(api: BatchAPI, state: BatchState) -> tuple[BatchState, list[str]]:
    seen = [state.status]
    for _ in range(20):
        if state.finished:
            return state, seen
        state = await api.poll(state.id)
        seen.append(state.status)
    raise AssertionError(f"the batch never finished: {seen}")


@pytest.fixture
def double() -> object:
    with BatchDouble() as api:
        yield api


@pytest.fixture
async def client(double: BatchDouble) -> object:
    api = BatchAPI(base_url=double.base_url, api_key="sk-test", timeout_s=5.0)
    yield api
    await api.close()


async def test_each_input_line_carries_the_body_the_online_transport_sends() -> None:
    asked = [
        request("judge this"),
        request(
            "judge that", schema=None, temperature=None, max_tokens_name="max_completion_tokens"
        ),
        request(
            "use a tool",
            schema=None,
            tools=[
                {"type": "function", "function": {"name": "pick", "parameters": {"type": "object"}}}
            ],
        ),
    ]
    with MockJudge() as judge:
        online = OpenAIChatAPI(base_url=judge.base_url, api_key="sk-test", timeout_s=5.0)
        try:
            for r in asked:
                assert isinstance(await online.complete(r), Answered)
        finally:
            await online.close()
        sent = [record["body"] for record in judge.requests]
    batched = [job_id(f"k{n}", r) for n, r in enumerate(asked)]
    lines = [
        orjson.loads(line)
        for line in batch_input(
            [BatchJob(i, r) for i, r in zip(batched, asked, strict=True)]
        ).splitlines()
    ]
    assert [line["body"] for line in lines] == sent
    assert [line["custom_id"] for line in lines] == batched
    assert {(line["method"], line["url"]) for line in lines} == {("POST", "/v1/chat/completions")}


def test_a_job_id_is_the_same_after_a_restart_and_differs_by_key_and_body() -> None:
    first = job_id("rule-a/trace-1/v1", request("judge trace 1"))
    assert first == job_id("rule-a/trace-1/v1", request("judge trace 1"))
    assert first != job_id("rule-a/trace-2/v1", request("judge trace 1"))
    assert first != job_id("rule-a/trace-1/v1", request("judge trace 1", model="gpt-4o"))
    assert first.startswith("judge-") and len(first) <= 64
    some = jobs(3)
    assert batch_key(some) == batch_key(list(reversed(some)))
    assert batch_key(some) != batch_key(some[:2])


def test_jobs_that_cannot_make_a_batch_are_refused_with_the_reason() -> None:
    with pytest.raises(BatchInputError, match="at least one job"):
        batch_input([])
    one = jobs(1)[0]
    with pytest.raises(BatchInputError, match=one.custom_id):
        batch_input([one, one])


async def test_upload_create_poll_and_read_round_trip(
    double: BatchDouble, client: BatchAPI
) -> None:
    asked = jobs(3)
    double.answers[asked[1].custom_id] = '{"score": 0.2, "reason": "off topic"}'
    state = await client.submit(asked, {"rule": "rule-a"})
    assert state.status == "validating" and state.total == 3
    batch = double.batches[state.id]
    assert batch.endpoint == "/v1/chat/completions"
    assert batch.metadata == {"rule": "rule-a", BATCH_KEY: batch_key(asked)}
    assert [line["custom_id"] for line in double.uploaded(batch.input_file_id)] == [
        j.custom_id for j in asked
    ]
    assert double.files[batch.input_file_id][0] == "batch"

    state, seen = await run_to_end(client, state)
    assert seen == ["validating", "in_progress", "finalizing", "completed"]
    assert (state.total, state.completed, state.failed) == (3, 3, 0)
    results = await client.results(state, [j.custom_id for j in asked])
    assert results.stray == []
    assert all(isinstance(item, ItemAnswered) for item in results.items.values())
    answered = results.items[asked[1].custom_id]
    assert isinstance(answered, ItemAnswered)
    parsed = answered.answered(asked[1].request)
    assert parsed.content == '{"score": 0.2, "reason": "off topic"}'
    assert (
        parsed.model == "gpt-4o-mini" and parsed.usage is not None and parsed.usage.total_tokens > 0
    )
    other = results.items[asked[0].custom_id]
    assert isinstance(other, ItemAnswered)
    assert other.answered(asked[0].request).content == double.default


async def test_results_of_an_unfinished_batch_are_refused(
    double: BatchDouble, client: BatchAPI
) -> None:
    state = await client.submit(jobs(1))
    with pytest.raises(ValueError, match="not finished"):
        await client.results(state, [])


async def test_partial_failures_are_mapped_to_their_jobs(
    double: BatchDouble, client: BatchAPI
) -> None:
    asked = jobs(4)
    double.answers[asked[1].custom_id] = ItemError(
        "max_tokens is too large", status=400, code="invalid_value"
    )
    double.answers[asked[2].custom_id] = ItemError("the server had an error", status=500)
    double.answers[asked[3].custom_id] = ItemError("no capacity", status=None, code="server_error")
    state, _ = await run_to_end(client, await client.submit(asked))
    assert state.status == "completed" and (state.completed, state.failed) == (1, 3)
    items = (await client.results(state, [j.custom_id for j in asked])).items
    assert isinstance(items[asked[0].custom_id], ItemAnswered)
    refused, server, no_response = (items[j.custom_id] for j in asked[1:])
    assert isinstance(refused, ItemFailed) and refused.kind == "refused" and refused.status == 400
    assert "max_tokens is too large" in refused.reason and refused.code == "invalid_value"
    assert isinstance(server, ItemFailed) and server.kind == "error" and server.status == 500
    assert isinstance(no_response, ItemFailed) and no_response.kind == "error"
    assert no_response.status is None and "no capacity" in no_response.reason


@pytest.mark.parametrize("in_error_file", [False, True])
async def test_an_expired_batch_answers_some_and_the_rest_are_expired(
    double: BatchDouble, client: BatchAPI, in_error_file: bool
) -> None:
    asked = jobs(3)
    double.ending = "expired"
    double.unfinished = {asked[0].custom_id, asked[2].custom_id}
    double.expired_in_error_file = in_error_file
    state, seen = await run_to_end(client, await client.submit(asked))
    assert seen[-1] == "expired"
    items = (await client.results(state, [j.custom_id for j in asked])).items
    assert isinstance(items[asked[1].custom_id], ItemAnswered)
    for job in (asked[0], asked[2]):
        item = items[job.custom_id]
        assert isinstance(item, ItemFailed) and item.kind == "expired", item
        assert "expired" in item.reason


async def test_a_batch_that_fails_validation_fails_every_job_with_the_errors(
    double: BatchDouble, client: BatchAPI
) -> None:
    asked = jobs(2)
    double.reject = {2: "the model gpt-4o-mini is not available for batch"}
    state, seen = await run_to_end(client, await client.submit(asked))
    assert seen == ["validating", "failed"]
    assert state.errors == (
        "line 2: the model gpt-4o-mini is not available for batch (invalid_request)",
    )
    assert state.output_file_id is None and state.error_file_id is None
    items = (await client.results(state, [j.custom_id for j in asked])).items
    for job in asked:
        item = items[job.custom_id]
        assert isinstance(item, ItemFailed) and item.kind == "batch_failed"
        assert "not available for batch" in item.reason


async def test_a_resubmission_after_a_restart_finds_the_batch_already_submitted(
    double: BatchDouble, client: BatchAPI
) -> None:
    asked = jobs(2)
    submitted = await client.submit(asked)
    await client.submit(jobs(5)[3:])  # another batch since
    found = await client.find(batch_key(list(reversed(asked))))
    assert found is not None and found.id == submitted.id
    assert await client.find(batch_key(jobs(1))) is None
    assert double.calls.count("POST /v1/batches") == 2


def test_lines_that_cannot_be_read_or_matched_are_reported_and_their_jobs_not_lost() -> None:
    state = BatchState(id="batch_1", status="completed", total=2, completed=1)
    output = b'{"custom_id": "a", "response": {"status_code": 200, "body": {"id": "x"}}}\nnot json\n{"custom_id": "zz", "error": {"code": "x", "message": "y"}}\n'
    results = read_results(state, ["a", "b"], output)
    assert isinstance(results.items["a"], ItemAnswered)
    missing = results.items["b"]
    assert isinstance(missing, ItemFailed) and missing.kind == "missing"
    assert results.stray == ["not json", "unknown custom_id 'zz'"]


def test_an_answer_wins_over_an_error_line_for_the_same_job() -> None:
    state = BatchState(id="batch_1", status="completed")
    error = b'{"custom_id": "a", "response": {"status_code": 500, "body": {"error": {"message": "boom"}}}}\n'
    output = b'{"custom_id": "a", "response": {"status_code": 200, "body": {"id": "x"}}}\n'
    for files in ((output, error), (error, output)):
        assert isinstance(read_results(state, ["a"], *files).items["a"], ItemAnswered)
