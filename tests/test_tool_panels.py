"""The quality dashboard's tool-call row (issue 50): each tool's pass rate per tool-call rule,
and failing calls per minute by tool, read from the tool-call families summed over workers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from test_dashboards import dashboards, hour_case, run_promtool_case

PASS_RATE = "Tool calls: pass rate by tool and rule over the range"
FAILING = "Tool calls: failing calls per minute by tool"


def panel(title: str) -> dict[str, Any]:
    return next(p for p in dashboards()["quality.json"]["panels"] if p["title"] == title)


def expr(title: str) -> str:
    """The panel's query, every pack, rule and tool, over one hour (rate window 5 minutes)."""
    (target,) = panel(title)["targets"]
    return (
        re.sub(r"\$(pack|rule|tool)\b", ".*", target["expr"])
        .replace("$__range", "1h")
        .replace("$__rate_interval", "5m")
    )


def tool_series() -> dict[str, str]:
    """An hour of two workers' tool-call scores, per minute: search fails tool_declared on
    w1 (2 of 2) and passes on w2 (2 of 2), and w2 also skips it twice; get_weather fails
    tool_call_succeeded once in 4 and always passes tool_declared; lookup's judge answered
    nothing (skipped only)."""
    series = {}
    for instance, rule, tool, ok, low, skipped in (
        ("w1", "tool_declared", "search", 2, 2, 0),
        ("w2", "tool_declared", "search", 2, 0, 2),
        ("w1", "tool_call_succeeded", "get_weather", 4, 1, 0),
        ("w1", "tool_declared", "get_weather", 4, 0, 0),
        ("w1", "tool_result_used", "lookup", 0, 0, 3),
    ):
        pack = "tool_quality" if rule == "tool_result_used" else "tools"
        where = f'rule="{rule}", pack="{pack}", tool="{tool}", instance="{instance}"'
        series[f"scorer_tool_call_score_value_count{{{where}}}"] = f"0+{ok}x60"
        series[f"scorer_tool_call_low_scores_total{{{where}}}"] = f"0+{low}x60"
        series[f'scorer_tool_call_scores_total{{{where}, status="ok"}}'] = f"0+{ok}x60"
        series[f'scorer_tool_call_scores_total{{{where}, status="skipped"}}'] = f"0+{skipped}x60"
    return series


PASS_RATES = [
    ('{pack="tools", rule="tool_declared", tool="search"}', 0.5),  # both workers summed
    ('{pack="tools", rule="tool_call_succeeded", tool="get_weather"}', 0.75),
    ('{pack="tools", rule="tool_declared", tool="get_weather"}', 1.0),
    # lookup: no ok score, no pass rate (not 1, not 0)
]
FAILING_PER_MINUTE = [
    ('{tool="search"}', 2.0),
    ('{tool="get_weather"}', 1.0),
    ('{tool="lookup"}', 0.0),
]


def test_the_pass_rate_is_each_tools_ok_scores_not_low_over_every_worker(tmp_path: Path) -> None:
    case = hour_case(tool_series(), [expr(PASS_RATE)], [PASS_RATES])
    result = run_promtool_case(tmp_path, case)
    assert result.returncode == 0, result.stdout + result.stderr
    # over every score published, skipped ones too, search reads 0.67: caught
    published = expr(PASS_RATE).replace(
        "scorer_tool_call_score_value_count{", "scorer_tool_call_scores_total{"
    )
    result = run_promtool_case(tmp_path, hour_case(tool_series(), [published], [PASS_RATES]))
    assert result.returncode != 0
    assert 'tool="search"' in result.stdout + result.stderr


def test_failing_calls_are_counted_per_minute_by_tool(tmp_path: Path) -> None:
    case = hour_case(tool_series(), [expr(FAILING)], [FAILING_PER_MINUTE])
    result = run_promtool_case(tmp_path, case)
    assert result.returncode == 0, result.stdout + result.stderr
    # per second, every rate reads 60 times smaller: caught
    per_second = expr(FAILING).removesuffix(" * 60")
    result = run_promtool_case(
        tmp_path, hour_case(tool_series(), [per_second], [FAILING_PER_MINUTE])
    )
    assert result.returncode != 0


def test_the_row_starts_below_the_rest_and_filters_by_tool() -> None:
    quality = dashboards()["quality.json"]
    bars, failing = panel(PASS_RATE), panel(FAILING)
    above = [p for p in quality["panels"] if p["id"] < bars["id"]]
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in above)
    assert bars["gridPos"]["x"] == 0 and bars["gridPos"]["y"] >= bottom
    assert failing["gridPos"]["y"] == bars["gridPos"]["y"]  # side by side
    variable = next(v for v in quality["templating"]["list"] if v["name"] == "tool")
    assert (
        variable["definition"] == 'label_values(scorer_tool_call_scores_total{pack=~"$pack"}, tool)'
    )
    for title in (PASS_RATE, FAILING):
        (target,) = panel(title)["targets"]
        assert 'tool=~"$tool"' in target["expr"] and 'rule=~"$rule"' in target["expr"]
