"""skyrl_nb.compare: several runs' curves overlaid."""

from __future__ import annotations

import pytest
from inspector_runs import write_run

from skyrl_core.runs import RunReader
from skyrl_nb.compare import RunComparison, compare


def test_compare_overlays_runs(tmp_path):
    a = write_run(tmp_path / "a", steps=4).run_dir
    b = write_run(tmp_path / "b", steps=6, state="running").run_dir
    cmp = compare([a, RunReader(b)], metrics=["reward/avg_raw_reward", "policy/policy_kl"])
    assert isinstance(cmp, RunComparison) and cmp.labels == ["a", "b"]
    curves = cmp.curves()
    assert curves["reward/avg_raw_reward"]["a"][0] == [1, 2, 3, 4]
    assert len(curves["policy/policy_kl"]["b"][1]) == 6
    fig = cmp.figure()
    assert len(fig.data) == 4 and {t.name for t in fig.data} == {"a", "b"}
    frame = cmp.frame()
    assert set(frame.columns) == {"run", "step", "metric", "value"} and len(frame) == 2 * (4 + 6)
    assert "a: 4 steps" in repr(cmp) and "<table>" in cmp._repr_html_()
    bundle = cmp._repr_mimebundle_()
    assert "text/plain" in bundle and "text/html" in bundle
    assert cmp.figure(widget=True).__class__.__name__ == "FigureWidget"


def test_compare_smooths_refreshes_and_labels(tmp_path):
    from inspector_runs import write_step

    w = write_run(tmp_path / "x" / "run", steps=3, state="running")
    other = write_run(tmp_path / "y" / "run", steps=3).run_dir
    cmp = compare([w.run_dir, other], smooth=2)
    assert cmp.labels == ["x/run", "y/run"]
    steps, values = cmp.curves()["reward/avg_raw_reward"]["x/run"]
    raw = [r["reward/avg_raw_reward"] for r in RunReader(w.run_dir).metrics()]
    assert values[1] == pytest.approx((raw[0] + raw[1]) / 2)
    write_step(w, 4)
    assert cmp.refresh().curves()["reward/avg_raw_reward"]["x/run"][0] == [1, 2, 3, 4]


def test_compare_explains_bad_input(tmp_path):
    with pytest.raises(ValueError, match="runs is empty"):
        compare([])
    run = write_run(tmp_path / "a", steps=1).run_dir
    with pytest.raises(ValueError, match="labels"):
        compare([run], labels=["a", "b"])
    with pytest.raises(ValueError, match="metrics is empty"):
        compare([run], metrics=[])


def test_skyrl_nb_compare_is_callable_either_way(tmp_path):
    import skyrl_nb
    import skyrl_nb.compare as module

    run = write_run(tmp_path / "a", steps=2).run_dir
    assert isinstance(module([run]), RunComparison)  # the submodule itself, as `skyrl_nb.compare` binds it
    assert isinstance(skyrl_nb.compare([run]), RunComparison)


def test_compare_draws_with_the_dashboards_charts_and_keeps_overlaps_apart(tmp_path):
    """Readable titles (the key below), the dashboard's chart widget, and two identical runs both visible:
    other dash patterns and widths, and the legend says which curve another one repeats."""
    from skyrl_widgets.charts import MetricChart

    a = write_run(tmp_path / "a", steps=5).run_dir
    b = write_run(tmp_path / "b", steps=5).run_dir  # the same rows as a
    cmp = compare([a, b], metrics=["reward/avg_raw_reward", "policy/policy_kl"])
    reward, kl = cmp.panels()
    assert (reward["title"], reward["subtitle"]) == ("reward (mean)", "reward/avg_raw_reward")
    assert kl["title"] == "KL to the reference" and reward["y"]["range"] == [0.0, 1.0]
    first, second = reward["series"]
    assert first["points"] == second["points"] and (first["dash"], first["width"]) != (second["dash"], second["width"])
    assert second["note"] == "(same curve as a)" and first["note"] == ""
    charts = cmp.widget().children
    assert [type(c).__name__ for c in charts] == [MetricChart.__name__] * 2 and charts[0].title == "reward (mean)"
    svg = cmp.to_svg()
    assert svg.startswith("<svg") and "reward (mean)" in svg and "(same curve as a)" in svg
    bundle = cmp._repr_mimebundle_()  # no widget front end here: the static SVG and the table
    assert "<svg" in bundle["text/html"] and "last reward (mean)" in bundle["text/html"]
