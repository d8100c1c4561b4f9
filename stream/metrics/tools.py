"""The tool-call score metrics (issue 50): the scores of ``scope: tool_call`` rules counted by
the tool's name, so that a dashboard shows which tool fails which check.

- ``scorer_tool_call_scores_total{rule, pack, tool, status}``: tool-call scores published;
- ``scorer_tool_call_score_value{rule, pack, tool}`` (``_count``, ``_sum``): the ok scores and
  their normalised values (their mean; for pass/fail and yes/no rules, the pass rate);
- ``scorer_tool_call_low_scores_total{rule, pack, tool}``: ok scores on the bad side of their
  scale (a failed check, a "no"), from 0 at a series' first ok score so that a share of them
  reads 0, not nothing.

The ``tool`` label is bounded as ``project`` is (``projects.py``): the first ``limit`` tool
names a worker scores keep their name, every later one reads ``other``
(``SCORER_METRIC_TOOL_LIMIT``), and a folded name is not remembered. No project label: a
series per rule and kept tool. Shadow judges' scores are left out, as from the score metrics,
and those metrics (``scorer_scores_total`` and the rest, which the alerts read) count
tool-call scores as before.
"""

from __future__ import annotations

import logging
import re

from prometheus_client import CollectorRegistry, Counter, Summary

from ..models import ScoreEvent
from .low import is_low
from .pacing import PREFIX
from .projects import OTHER

log = logging.getLogger(__name__)

DEFAULT_TOOL_LIMIT = 20  # tool names labelled as they come (SCORER_METRIC_TOOL_LIMIT)
LABELS = ("rule", "pack", "tool")
# what a tool name looks like (OpenAI's function names, ``^[a-zA-Z0-9_-]{1,64}$``, and the dots,
# colons and slashes of MCP servers' namespaced names): anything else a model made up is never
# a label of its own, nor takes a place among the kept ones
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")


class ToolLabels:
    """What ``tool`` label a call's score gets: its name for the first ``limit`` names that look
    like a tool's (``TOOL_NAME``), ``other`` for every later one and every other name (a
    warning says so once, naming the setting)."""

    def __init__(self, limit: int = DEFAULT_TOOL_LIMIT) -> None:
        if limit < 0:
            raise ValueError(f"the tool limit must be 0 or more, not {limit}")
        self._limit = limit
        self._kept: set[str] = set()
        self._folded = False

    def label(self, tool: str) -> str:
        if tool in self._kept:
            return tool
        if not TOOL_NAME.fullmatch(tool):
            return OTHER
        if len(self._kept) < self._limit:
            self._kept.add(tool)
            return tool
        if not self._folded:
            self._folded = True
            log.warning(
                "tool-call metrics: %d tool names are labelled by name already "
                "(SCORER_METRIC_TOOL_LIMIT): tool %r and every later new one are labelled %r",
                self._limit,
                tool,
                OTHER,
            )
        return OTHER

    @property
    def kept(self) -> frozenset[str]:
        """The tool names labelled by name so far."""
        return frozenset(self._kept)


class ToolCallMetrics:
    """The tool-call families on ``registry``; ``published`` counts one score."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scores = Counter(
            f"{PREFIX}_tool_call_scores",
            "Tool-call scores published, by the tool's name (after the first "
            "SCORER_METRIC_TOOL_LIMIT names: other) and status",
            (*LABELS, "status"),
            registry=registry,
        )
        self.value = Summary(
            f"{PREFIX}_tool_call_score_value",
            "Normalised values (0..1) of ok tool-call scores by tool: _count the ok scores, "
            "_sum their values (for pass/fail and yes/no rules: the passes)",
            LABELS,
            registry=registry,
        )
        self.low = Counter(
            f"{PREFIX}_tool_call_low_scores",
            "Ok tool-call scores on the bad side of their scale (a failed check, a no), by tool",
            LABELS,
            registry=registry,
        )
        self.tools = ToolLabels()
        self._children: dict[tuple[str, str, str], tuple[dict[str, Counter], Summary, Counter]] = {}

    def label_tools(self, tools: ToolLabels) -> None:
        """How many tool names the families label by name (``SCORER_METRIC_TOOL_LIMIT``)."""
        self.tools = tools

    def published(self, score: ScoreEvent) -> None:
        """Count ``score`` if it is a tool call's (its tool in ``details.tool``)."""
        if score.scope != "tool_call" or score.variant is not None:
            return
        tool = (score.details or {}).get("tool")
        label = self.tools.label(tool) if isinstance(tool, str) and tool else OTHER
        labels = (score.rule_id, score.pack, label)
        try:
            by_status, value, low = self._children[labels]
        except KeyError:
            by_status = {}
            value, low = self.value.labels(*labels), self.low.labels(*labels)
            self._children[labels] = (by_status, value, low)
        try:
            counted = by_status[score.status]
        except KeyError:
            counted = by_status[score.status] = self.scores.labels(*labels, score.status)
        counted.inc()
        if score.status == "ok" and score.value is not None:
            value.observe(score.value)
            if is_low(score.value, score.higher_is_better):  # (the series is there from 0)
                low.inc()
