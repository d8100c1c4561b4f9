"""Markdown tables of ``bench/score_alerts.py``'s figures, ready for docs/benchmarks.md."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

# the detection targets: (spread volume a minute, step, minutes)
TARGETS = ((60, 0.05, 20), (5, 0.1, 120))


def _cell(row: dict[str, Any]) -> str:
    delay = row["median_delay_min"]
    median = "-" if delay is None else f"{delay:.0f} min"
    return f"{row['found']}/{row['trials']}, {median}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def false_page_table(result: dict[str, Any]) -> list[str]:
    days = result["days"]
    rows = []
    for name, fp in result["false_pages"].items():
        which = Counter(p["project"].split("_")[1] + " " + p["rule"][3:] for p in fp["episodes"])
        where = ", ".join(f"{k} x{v}" for k, v in which.most_common(6)) or "-"
        outside = sum(r["pages_outside_drops"] for r in result["detection"].get(name, []))
        rows.append(
            [
                name,
                str(fp["pages"]),
                f"{fp['per_month']:.1f}",
                str(fp["warmup_pages"]),
                str(outside),
                where,
            ]
        )
    head = [
        "rule",
        f"false pages in {days} days",
        "per month",
        "in the warm-up (not counted)",
        "on the drop series, away from a drop",
        "where (volume, spread)",
    ]
    return _table(head, rows)


def detection_table(result: dict[str, Any], name: str) -> list[str]:
    rows: dict[tuple[str, float], dict[float, str]] = {}
    for r in result["detection"][name]:
        rows.setdefault((r["spread"], r["volume"]), {})[r["step"]] = _cell(r)
    steps = sorted({r["step"] for r in result["detection"][name]})
    head = ["spread", "a minute"] + [f"drop {s:g}" for s in steps]
    body = [[sp, f"{v:g}"] + [cells.get(s, "") for s in steps] for (sp, v), cells in rows.items()]
    return _table(head, body)


def cusum_table(result: dict[str, Any]) -> list[str]:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for key, (lead, siegmund) in result["cusum_minutes"].items():
        spread, volume, step = key.split("/")
        rows.setdefault((spread, volume), {})[step] = f"{lead:.0f} ({siegmund:.0f}) min"
    steps = sorted({k.split("/")[2] for k in result["cusum_minutes"]}, key=float)
    head = ["spread", "a minute"] + [f"drop {s}" for s in steps]
    return _table(head, [[sp, v] + [c[s] for s in steps] for (sp, v), c in rows.items()])


def target_table(result: dict[str, Any]) -> list[str]:
    rows = []
    for volume, step, minutes in TARGETS:
        for name, det in result["detection"].items():
            for r in det:
                if r["volume"] == volume and math.isclose(r["step"], step):
                    delay = r["median_delay_min"]
                    met = delay is not None and delay <= minutes and r["found"] == r["trials"]
                    lead, siegmund = result["cusum_minutes"][f"{r['spread']}/{volume}/{step:g}"]
                    rows.append(
                        [
                            f"{step:g} at {volume}/min within {minutes} min",
                            name,
                            r["spread"],
                            _cell(r),
                            f"{lead:.0f} ({siegmund:.0f}) min",
                            "met" if met else "missed",
                        ]
                    )
    head = ["target", "rule", "spread", "found, median delay", "ideal CUSUM", ""]
    return _table(head, rows)


def explain_table(result: dict[str, Any]) -> list[str]:
    pages = [p for p in result["false_pages"]["new"]["episodes"] if "why" in p]
    if not pages:
        return []
    keys = list(pages[0]["why"])
    head = ["rule", "project", "fired (s from start)", *keys]
    body = [
        [p["rule"], p["project"], str(p["fired"])] + [f"{p['why'][k]:.4g}" for k in keys]
        for p in pages
    ]
    return _table(head, body)


def report_tables(result: dict[str, Any]) -> str:
    out = [f"Score-drop alerts: {result['days']} days (seed {result['seed']})", ""]
    out += ["Spreads:", ""]
    out += _table(
        ["spread", "what", "mean", "sd", "direction"],
        [
            [k, v["what"], f"{v['mean']:.3f}", f"{v['sd']:.3f}", str(v["direction"])]
            for k, v in result["spreads"].items()
        ],
    )
    out += ["", "False pages (the stationary series):", "", *false_page_table(result)]
    if any(result["detection"].values()):
        out += ["", "Targets:", "", *target_table(result)]
        for name in result["detection"]:
            out += ["", f"Detection, {name} (found within 6 h / trials, median delay):", ""]
            out += detection_table(result, name)
        out += [
            "",
            "An ideal CUSUM at the target false-alarm rate: 2 ln(ARL) / delta^2 scores"
            " (Siegmund's 2 ln(ARL delta^2 / 2) / delta^2), delta = drop / sd:",
            "",
        ]
        out += cusum_table(result)
    explained = explain_table(result)
    if explained:
        out += ["", "The new rule's false pages, its windows when they fired:", "", *explained]
    out += ["", "Timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in result["timings_s"].items())]
    return "\n".join(out)
