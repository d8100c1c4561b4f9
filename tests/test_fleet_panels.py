"""The judge dashboard's fleet row (issue 48): the workers sharing one provider account, each
exporting what it reads of the fleet, read once per model and not once per worker."""

from __future__ import annotations

from pathlib import Path

from test_dashboards import cascade_panel_exprs, hour_case, run_promtool_case

ACCOUNT = 'account="3f2a9c1e0b7d4a65"'


def fleet_series() -> dict[str, str]:
    """An hour of two workers reading the topic, each paced at 4 calls a second (the fleet
    at 8, as each reads it) and sharing the account half and half; a third that cannot read
    the topic, alone at 10 a second."""
    series = {}
    for instance, shared, workers, pace, fleet in (("w1", 1, 2, 4, 8), ("w2", 1, 2, 4, 8)):
        where = f'model="m", {ACCOUNT}, instance="{instance}"'
        series[f"scorer_judge_fleet_shared{{{where}}}"] = f"{shared}x60"
        series[f"scorer_judge_fleet_workers{{{where}}}"] = f"{workers}x60"
        series[f"scorer_judge_fleet_pace_rps{{{where}}}"] = f"{fleet}x60"
        series[f'scorer_judge_pace_rps{{model="m", reason="measured", instance="{instance}"}}'] = (
            f"{pace}x60"
        )
    alone = f'model="m", {ACCOUNT}, instance="w3"'
    series[f"scorer_judge_fleet_shared{{{alone}}}"] = "0x60"
    series[f"scorer_judge_fleet_workers{{{alone}}}"] = "1x60"
    series[f"scorer_judge_fleet_pace_rps{{{alone}}}"] = "10x60"
    series['scorer_judge_pace_rps{model="m", reason="measured", instance="w3"}'] = "10x60"
    return series


def test_the_fleet_s_pace_and_workers_are_read_once_a_model_beside_each_worker_s(
    tmp_path: Path,
) -> None:
    pace = cascade_panel_exprs("Fleet: pace by model and each worker's (calls a second)")
    workers = cascade_panel_exprs("Fleet: workers sharing the account")
    expected = [
        [('{model="m"}', 8.0)],  # as w1 and w2 read it: w3, alone, is not in it
        [(f'{{instance="w{n}", model="m"}}', p) for n, p in ((1, 4.0), (2, 4.0), (3, 10.0))],
        [('{model="m"}', 2.0)],
        [('{model="m"}', 1.0)],  # w3 paces alone
    ]
    result = run_promtool_case(tmp_path, hour_case(fleet_series(), pace + workers, expected))
    assert result.returncode == 0, result.stdout + result.stderr
    # summed over the workers, the fleet's pace counts each worker's view of it: caught
    summed = [e.replace("max by (model) (", "sum by (model) (") for e in pace + workers]
    result = run_promtool_case(tmp_path, hour_case(fleet_series(), summed, expected))
    assert result.returncode != 0
    assert "scorer_judge_fleet_pace_rps" in result.stdout + result.stderr
