"""The judge canary (design record 47): a rule's reference items judged again on a schedule,
the verdict cache bypassed, and how many verdicts changed and how far they moved, per rule and
model. Pure: imports no Kafka, Faust, judge SDK or metrics library; the worker's side is
``stream/agents/canary.py``, the command that records items ``stream/cli/canary.py``."""

from .compare import CanaryRound, Rejudged, changed, summarise
from .events import canary_topic, rounds_of
from .rejudge import canary_rule, judge_inputs, judge_items

__all__ = [
    "CanaryRound",
    "Rejudged",
    "canary_rule",
    "canary_topic",
    "changed",
    "judge_inputs",
    "judge_items",
    "rounds_of",
    "summarise",
]
