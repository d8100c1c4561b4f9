"""The quality dashboard's row of tool calls (issue 50): the scores of ``scope: tool_call``
rules by the tool's name (``scorer_tool_call_*``, stream/metrics/tools.py), to see which tool
fails which check. Those families carry no project label; tools past
SCORER_METRIC_TOOL_LIMIT read ``other``."""

from __future__ import annotations

from panels import RULES, SHARE, Panel, Query, bars, graph

CALLS = f'{RULES}, tool=~"$tool"'
PER_TOOL = "{{tool}} · {{pack}}/{{rule}}"  # legend of per-tool-and-rule series
BY = "sum by (pack, rule, tool)"


def pass_rate(window: str) -> str:
    """The share of a tool's ok scores of a rule that are not low (a check passed, a judge's
    yes), over ``window``."""
    low = f"{BY} (increase(scorer_tool_call_low_scores_total{{{CALLS}}}[{window}]))"
    ok = f"{BY} (increase(scorer_tool_call_score_value_count{{{CALLS}}}[{window}]))"
    return f"1 - {low}\n/ ({ok} > 0)"


def tool_panels() -> list[Panel]:
    return [
        bars(
            "Tool calls: pass rate by tool and rule over the range",
            Query(pass_rate("$__range"), PER_TOOL, instant=True),
            **SHARE,
            height=12,
            new_row=True,
            description="Per tool and tool-call rule (the tools pack's checks, the tool_quality "
            "judges, your own): the share of the calls it scored ok that passed, i.e. were "
            "not on the bad side of the rule's scale. Skipped and error scores are left out "
            "(scorer_tool_call_scores_total counts them). Not split by project; tools past "
            "SCORER_METRIC_TOOL_LIMIT read 'other'.",
        ),
        graph(
            "Tool calls: failing calls per minute by tool",
            Query(
                "sum by (tool) (rate(scorer_tool_call_low_scores_total"
                f"{{{CALLS}}}[$__rate_interval])) * 60",
                "{{tool}}",
            ),
            stack=True,
            height=12,
            description="Tool calls that failed a tool-call rule, per minute, by tool: a call "
            "that fails two rules counts twice. Narrow it to one check with the rule variable; "
            "the bars beside it say which rules each tool fails.",
        ),
    ]
