"""The quality dashboard's panels of the score-drop test (design record 48): each rule's mean
against its baseline and the band chance allows, each window's drop, and the test's statistic
against the bound it must pass."""

from __future__ import annotations

from panels import PER_RULE, SCORES, SHARE, Panel, Query, graph

WINDOWS = ("15m", "1h", "2h", "6h")  # the drop test's windows (grafana/alerts/scorer.rules.yml)


def drop_panels() -> list[Panel]:
    return [
        graph(
            "Mean score per rule (1h) against its baseline and the band chance allows (dashed)",
            Query(f"scorer:score_s1:1h{{{SCORES}}} / scorer:score_n:1h{{{SCORES}}}", PER_RULE),
            Query(f"scorer:score_mean:baseline{{{SCORES}}}", PER_RULE + " baseline"),
            Query(
                f"scorer:score_mean:baseline{{{SCORES}}}\n"
                f"- scorer:score_drop_bound:1h{{{SCORES}}} * scorer:score_drop_se:1h{{{SCORES}}}",
                PER_RULE + " band low",
            ),
            Query(
                f"scorer:score_mean:baseline{{{SCORES}}}\n"
                f"+ scorer:score_drop_bound:1h{{{SCORES}}} * scorer:score_drop_se:1h{{{SCORES}}}",
                PER_RULE + " band high",
            ),
            **SHARE,
            width=24,
            height=10,
            dashed=".* (baseline|band low|band high)$",
            description="The baseline is the day before the last 6 hours. An hour's mean outside "
            "the band on the bad side is worse than chance allows for the hour's scores (z over "
            "its bound).",
        ),
        graph(
            "How much worse than the baseline (positive = worse, direction respected)",
            *(Query(f"scorer:score_drop:{w}{{{SCORES}}}", f"{PER_RULE} {w}") for w in WINDOWS),
            unit="percentunit",
            thresholds=[(None, "green"), (0.05, "red")],
            threshold_line=True,
            description="Each window's drop. The red line is the default alert.min_drop (0.05 "
            "of the scale): a drop surely under a rule's min_drop never pages.",
        ),
        graph(
            "The drop test: each window's z over the bound it must pass (pages above 1)",
            *(
                Query(
                    f"scorer:score_drop_z:{w}{{{SCORES}}} / scorer:score_drop_bound:{w}{{{SCORES}}}",
                    f"{PER_RULE} {w}",
                )
                for w in WINDOWS
            ),
            thresholds=[(None, "green"), (1, "red")],
            threshold_line=True,
            description="z: the drop in standard errors of the baseline's spread for the "
            "window's size. The bound is 5, raised for skewed scales (a pass rate near 1); a "
            "window pages above 1 with at least 30 scores and a drop that may matter.",
        ),
    ]
