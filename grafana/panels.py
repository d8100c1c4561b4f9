"""The building blocks of the Grafana dashboards (``dashboards.py`` writes them): panels and
their queries as data, the template variables, and their rendering to Grafana's JSON model,
laid out left to right, row by row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RULES = 'pack=~"$pack", rule=~"$rule"'
# the score metrics and their recording rules also carry a (bounded) project label
SCORES = f'{RULES}, project=~"$project"'
MODELS = 'model=~"$model"'
WIDTH = 24  # Grafana's grid
SHARE: dict[str, Any] = {"unit": "percentunit", "min": 0, "max": 1}  # a 0..1 axis
PER_RULE = "{{pack}}/{{rule}} {{criterion}} ({{project}})"  # legend of per-rule series


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    """One panel; ``width`` x ``height`` grid cells, laid out left to right, row by row."""

    kind: str  # timeseries | stat | bargauge
    title: str
    queries: list[Query]
    description: str = ""
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    thresholds: list[tuple[float | None, str]] = field(default_factory=lambda: [(None, "green")])
    threshold_line: bool = False  # timeseries: draw the thresholds as lines
    stack: bool = False
    dashed: str | None = None  # timeseries: regex of series drawn dashed (baselines)
    decimals: int | None = None
    new_row: bool = False  # start a row of its own (a group of panels that belong together)


def stat(title: str, expr: str, unit: str = "short", **options: Any) -> Panel:
    return Panel("stat", title, [Query(expr)], unit=unit, width=4, height=4, **options)


def graph(title: str, *queries: Query, **options: Any) -> Panel:
    return Panel("timeseries", title, list(queries), **options)


def bars(title: str, *queries: Query, **options: Any) -> Panel:
    return Panel("bargauge", title, list(queries), **options)


def quantile(q: float, histogram: str, by: str, selector: str = "") -> Query:
    return Query(
        f"histogram_quantile({q}, sum by (le{by}) (rate({histogram}_bucket{{{selector}}}"
        "[$__rate_interval])))",
        f"p{round(q * 100)}" + (" {{model}}" if "model" in by else ""),
    )


def variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


VARIABLES = {
    "pack": lambda: variable("pack", "label_values(scorer_rule_direction, pack)", "Pack"),
    "rule": lambda: variable(
        "rule", 'label_values(scorer_rule_direction{pack=~"$pack"}, rule)', "Rule"
    ),
    "project": lambda: variable(
        "project", 'label_values(scorer_scores_total{pack=~"$pack"}, project)', "Project"
    ),
    "model": lambda: variable("model", "label_values(scorer_judge_calls_total, model)", "Model"),
    "tool": lambda: variable(
        "tool", 'label_values(scorer_tool_call_scores_total{pack=~"$pack"}, tool)', "Tool"
    ),
}


def thresholds(steps: list[tuple[float | None, str]]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in steps]}


def render_panel(panel: Panel, index: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": thresholds(panel.thresholds)}
    for key in ("min", "max", "decimals"):
        if getattr(panel, key) is not None:
            defaults[key] = getattr(panel, key)
    overrides: list[dict[str, Any]] = []
    options: dict[str, Any]
    if panel.kind == "timeseries":
        defaults["color"] = {"mode": "palette-classic"}
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 2,
            "fillOpacity": 20 if panel.stack else 0,
            "showPoints": "never",
            "spanNulls": True,
            "stacking": {"mode": "normal" if panel.stack else "none"},
            "thresholdsStyle": {"mode": "line" if panel.threshold_line else "off"},
        }
        if panel.dashed:
            overrides.append(
                {
                    "matcher": {"id": "byRegexp", "options": panel.dashed},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "custom.lineWidth", "value": 1},
                    ],
                }
            )
        options = {
            "legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "area",
            "textMode": "value",
        }
    else:  # bargauge
        defaults["color"] = {"mode": "continuous-RdYlGr"}
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
        }
    rendered: dict[str, Any] = {
        "id": index,
        "type": panel.kind,
        "title": panel.title,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": q.expr,
                "legendFormat": q.legend or "__auto",
                "instant": q.instant,
                "range": not q.instant,
            }
            for i, q in enumerate(panel.queries)
        ],
    }
    if panel.description:
        rendered["description"] = panel.description
    return rendered


def render(meta: dict[str, Any], panels: list[Panel]) -> dict[str, Any]:
    used = "\n".join(q.expr for p in panels for q in p.queries)
    names = [n for n in VARIABLES if f"${n}" in used]
    rendered, x, y, row_height = [], 0, 0, 0
    for index, panel in enumerate(panels, start=1):
        if x + panel.width > WIDTH or (panel.new_row and x > 0):
            x, y, row_height = 0, y + row_height, 0
        rendered.append(render_panel(panel, index, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": True, "text": "Prometheus", "value": "prometheus"},
    }
    return {
        **meta,
        "tags": ["llm-scorer"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "graphTooltip": 1,
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["llm-scorer"],
                "asDropdown": False,
                "title": "LLM scorer",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "templating": {"list": [datasource, *(VARIABLES[n]() for n in names)]},
        "panels": rendered,
    }
