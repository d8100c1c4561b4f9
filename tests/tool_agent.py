"""An agent with tools, written as a team writes one: the real OpenAI SDK calls the model in a
loop, the app runs the tools the model asks for and sends their results back, until the model
answers. Its model here is ``scripted_judge.MockJudge`` playing the application's model: a real
local HTTP server answering OpenAI's chat API, whose tool-call replies follow the installed
SDK's ``ChatCompletion`` type (``assistant`` message, ``tool_calls`` of ``type: function`` with
``id``, ``function.name`` and ``function.arguments`` as JSON text, ``finish_reason:
tool_calls``; ``tests/integration/test_tool_call_otel.py`` validates a reply against that type).

Telemetry, when the agent is given a ``TelemetryHandler`` (``opentelemetry-util-genai``, the
library the OpenAI instrumentation is built on): an ``invoke_agent`` span around the run holding
the tools declared to the model (``gen_ai.tool.definitions``), and an ``execute_tool`` span per
tool run with its call id, arguments and result (a tool that raised: ``error.type``). The model
calls' ``chat`` spans come from ``opentelemetry-instrumentation-openai-v2`` around the client.
Without a handler (the client's instrumentation alone) the root is a plain span of the app's
tracer: the instrumentation (2.4b0) does not record the request's ``tools``.

The conversation (``script_model``): the user asks about an order; the model calls
``get_order`` (valid) and ``check_stock`` (the inventory times out: the tool fails), then
``track_parcel`` without its required ``carrier`` (the app's own function defaults it, so the
call runs) and ``issue_refund``, which the app can run but did not declare to this agent; then
it answers. ``EXPECTED`` is what the ``tools`` pack's checks should say of each call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from opentelemetry.trace import Tracer
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import FunctionToolDefinition
from scripted_judge import MockJudge, Reply

MODEL = "gpt-4o-mini"
AGENT = "velo-support"
SYSTEM = "You are Velo's support agent. Look orders up with the tools; answer in two sentences."
QUESTION = "Where is my order A-1001, and do you have the Trek FX 2 in size M?"
ANSWER = (
    "Order A-1001 is out for delivery with DHL, due on 12 June; refund R-77 is issued. "
    "I could not check the FX 2's stock just now: the inventory did not answer."
)


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


# the tools declared to the model (the request's ``tools``)
TOOLS = [
    _tool("get_order", "An order's status.", {"order_id": {"type": "string"}}),
    _tool(
        "check_stock",
        "Units in stock of a product in one size.",
        {"sku": {"type": "string"}, "size": {"type": "string", "enum": ["S", "M", "L", "XL"]}},
    ),
    _tool(
        "track_parcel",
        "Where a parcel is.",
        {
            "carrier": {"type": "string", "enum": ["dhl", "ups"]},
            "tracking_number": {"type": "string"},
        },
    ),
]


def get_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped", "tracking_number": "JD014600006"}


def check_stock(sku: str, size: str) -> dict[str, Any]:
    raise TimeoutError("the inventory service did not answer in 5 s")


def track_parcel(tracking_number: str, carrier: str = "dhl") -> dict[str, Any]:
    return {"tracking_number": tracking_number, "status": "out for delivery", "eta": "06-12"}


def issue_refund(order_id: str) -> dict[str, Any]:
    return {"refund_id": "R-77", "order_id": order_id, "amount_eur": 649.0}


# what the app can run: more than it declared to this agent (``issue_refund`` is for staff)
RUNNABLE: dict[str, Callable[..., dict[str, Any]]] = {
    "get_order": get_order,
    "check_stock": check_stock,
    "track_parcel": track_parcel,
    "issue_refund": issue_refund,
}

# the model's turns: the calls it makes, in order
TURNS: list[list[tuple[str, dict[str, Any]]]] = [
    [("get_order", {"order_id": "A-1001"}), ("check_stock", {"sku": "TREK-FX2", "size": "M"})],
    [
        ("track_parcel", {"tracking_number": "JD014600006"}),
        ("issue_refund", {"order_id": "A-1001"}),
    ],
]

RULES = (
    "tool_arguments_valid",
    "tool_call_succeeded",
    "tool_calls_per_turn",
    "tool_declared",
    "tool_not_repeated",
)
# each call's values (1 pass, 0 fail) by the tools pack's rules; the rules not named pass
EXPECTED: dict[str, dict[str, float]] = {
    "get_order": {},
    "check_stock": {"tool_call_succeeded": 0.0},
    "track_parcel": {"tool_arguments_valid": 0.0},
    "issue_refund": {"tool_declared": 0.0},
}


def expected(tool: str) -> dict[str, float]:
    """The value each of the tools pack's rules should give a call of ``tool``."""
    return {rule: EXPECTED[tool].get(rule, 1.0) for rule in RULES}


def script_model(model: MockJudge) -> None:
    """The model's replies, each matched by the last message of the request it answers."""
    model.script(QUESTION, Reply(tool_calls=TURNS[0]))
    model.script("did not answer", Reply(tool_calls=TURNS[1]))  # check_stock's error, last
    model.script("R-77", ANSWER)  # issue_refund's result, last


@dataclass
class Run:
    """One run of the agent: the conversation as the model was sent it (OpenAI chat messages),
    and the calls the model made, as (call id, tool name)."""

    messages: list[dict[str, Any]]
    calls: list[tuple[str, str]] = field(default_factory=list)
    trace_id: str = ""


class Agent:
    """The loop: ask, run the tools asked for, send their results, until the model answers."""

    def __init__(
        self, client: openai.OpenAI, tracer: Tracer, handler: TelemetryHandler | None = None
    ) -> None:
        self.client, self.tracer, self.handler = client, tracer, handler

    def run(self, question: str = QUESTION, max_turns: int = 5) -> Run:
        if self.handler is None:  # the client's instrumentation alone: a span of the app's own
            with self.tracer.start_as_current_span("support-agent") as root:
                run = self._loop(question, max_turns)
        else:
            with self.handler.invoke_local_agent(agent_name=AGENT, request_model=MODEL) as agent:
                agent.tool_definitions = [
                    FunctionToolDefinition(
                        name=t["function"]["name"],
                        description=t["function"]["description"],
                        parameters=t["function"]["parameters"],
                    )
                    for t in TOOLS
                ]
                root = agent.span
                run = self._loop(question, max_turns)
        run.trace_id = f"{root.get_span_context().trace_id:032x}"
        return run

    def _loop(self, question: str, max_turns: int) -> Run:
        run = Run([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
        for _ in range(max_turns):
            reply = self.client.chat.completions.create(
                model=MODEL,
                messages=run.messages,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
            )
            message = reply.choices[0].message
            run.messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return run
            for call in message.tool_calls:
                assert call.type == "function"
                run.calls.append((call.id, call.function.name))
                result = self._tool(call.id, call.function.name, call.function.arguments)
                run.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )
        raise RuntimeError(f"no answer in {max_turns} turns")

    def _tool(self, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        """Run one tool (in an ``execute_tool`` span where there is a handler); a tool that
        raises answers the model with its error, as agent frameworks do."""
        parsed = json.loads(arguments)
        if self.handler is None:
            return _called(name, parsed)[0]
        with self.handler.tool(name, tool_call_id=call_id, tool_type="function") as span:
            if span.should_capture_content_on_span:
                span.arguments = parsed
            result, failed = _called(name, parsed)
            if span.should_capture_content_on_span:
                span.tool_result = result
            if failed is not None:
                span.fail(failed)
        return result


def _called(name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], Exception | None]:
    try:
        return RUNNABLE[name](**arguments), None
    except Exception as exc:
        return {"error": str(exc)}, exc


def trace_model(run: Run, trace_id: str, project: str = "velo") -> dict[str, Any]:
    """The run as a trace in the trace model (Opik's, with OpenAI's chat messages): the
    request's messages and declared tools as ``input``, what followed as ``output``."""
    return {
        "id": trace_id,
        "name": "support-agent",
        "project_name": project,
        "input": {"messages": run.messages[:2], "tools": TOOLS},
        "output": {"messages": run.messages[2:]},
    }
