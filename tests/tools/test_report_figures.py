"""The report's figures read right (``recipe.arise.tools.report_figures`` / ``report_plots``): a tiny run
built here (metrics.jsonl with Phase I and Phase II rows, the per-step library log, a checkpointed
library) is drawn, and each figure's series, axes and labels are read from the matplotlib objects."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Contrast
from recipe.arise.core.library_log import write_step_log
from recipe.arise.core.skill import SkillDoc
from recipe.arise.tools import report as rep
from recipe.arise.tools.report_figures import RATE_PANELS, draw_figures, wilson_interval

STEPS, PHASE1 = 8, 3  # Phase I: steps 1-3, Phase II: 4-8
QUERIES, G = 4, 8


def _doc(name: str, insight: str) -> SkillDoc:
    return SkillDoc(name, "number_theory", insight, ("Pair the numbers", "Add"), "Recount").validate()


def build_tiny_run(root: Path, checkpoint: bool = True) -> Path:
    """Every generated skill is named ``make_ten`` (as a small model's often are); in Phase II the first
    cache entry earns R=2 (high utility) while its control arm does better (negative uplift)."""
    lib = SkillLibrary(cache_capacity=4, reservoir_capacity=8, seed_skills=[_doc("seed_pairs", "Pair terms")])
    log_root = root / "checkpoints" / "arise"
    lines = []
    for step in range(1, STEPS + 1):
        phase = 1 if step <= PHASE1 else 2
        new = [_doc("make_ten", f"Group numbers into tens, variant {step}")]
        obs, contrasts = [], []
        if phase == 2:
            ids = lib.cache_ids()
            obs = [(ids[0], 2.0)] * 3 + [(ids[1], 1.0), (ids[-1], 0.0)]
            contrasts = [Contrast(ids[0], 3, 1, 2, 2), Contrast(ids[1], 2, 2, 2, 1)]
        events = lib.step(obs, new, step=step, global_rewards=[r for _, r in obs] + [1.0], contrasts=contrasts)
        write_step_log(log_root, step, phase, events, lib)
        acc = 0.58 if phase == 1 else 0.29 + 0.05 * (step - PHASE1)
        lines.append(
            {
                "step": step,
                "data": {
                    "arise/phase": float(phase),
                    "arise/queries": float(QUERIES),
                    "arise/trajectories": float(QUERIES * G),
                    "arise/acc": acc,
                    "arise/reward_mean": acc * (1.0 if phase == 1 else 1.4),
                    "arise/skill_use_rate": 0.0 if phase == 1 else 0.5,
                    "arise/gate_pass_rate": 0.0 if phase == 1 else 0.7,  # logged as 0 in Phase I
                    "arise/gate_target": 0.73,
                    **({"arise/gate_pass_rate_recent": 0.72} if phase == 2 else {}),
                    "arise/frac_reward_1": acc if phase == 1 else 0.1,
                    "arise/frac_reward_2": 0.0 if phase == 1 else 0.2,
                    "arise/mixed_group_rate": 0.0 if phase == 1 else 0.25,
                    "arise/summary_parse_rate": 0.9,
                    "arise/summary_fallback_rate": 0.1,
                },
            }
        )
    if checkpoint:
        lib.save(root / "checkpoints" / f"global_step_{STEPS}" / "arise" / "library.parquet")
    (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    root = build_tiny_run(tmp_path_factory.mktemp("tiny_run"))
    run = rep.load_run(root)
    figures, _, missing = draw_figures(run, tmp_path_factory.mktemp("figs"))
    return {"run": run, "figs": {f.key: f for f in figures}, "missing": missing}


def _line(ax, label: str):
    found = [ln for ln in ax.get_lines() if ln.get_label() == label]
    assert len(found) == 1, (label, [ln.get_label() for ln in ax.get_lines()])
    return found[0]


def _legend(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg is not None else []


def _phase_lines(ax) -> list[float]:
    """x of the vertical dashed lines (axvline: two points at one x, spanning the axes)."""
    return [
        float(ln.get_xdata()[0])
        for ln in ax.get_lines()
        if len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1] and ln.get_linestyle() == "--"
    ]


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(0.5, 4)  # 2 of 4
    assert lo == pytest.approx(0.1500, abs=1e-4) and hi == pytest.approx(0.8500, abs=1e-4)
    lo, hi = wilson_interval(0.0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert all(math.isnan(x) for x in wilson_interval(0.5, 0))


def test_rates_split_into_panels_and_phase1_values_that_do_not_apply_left_out(drawn):
    f = drawn["figs"]["rates"]
    axes = f.fig.axes
    assert [ax.get_title(loc="left") for ax in axes] == [title for title, _ in RATE_PANELS]
    for ax, (_, pairs) in zip(axes, RATE_PANELS, strict=True):
        assert _legend(ax) == [label for _, label in pairs]  # every series named, in its own panel
        assert _phase_lines(ax) == [PHASE1 + 0.5]
    phase2 = list(range(PHASE1 + 1, STEPS + 1))
    for key in ("arise/gate_pass_rate", "arise/gate_target", "arise/mixed_group_rate"):
        ax, label = next((ax, lbl) for ax, (_, p) in zip(axes, RATE_PANELS, strict=True) for k, lbl in p if k == key)
        assert list(_line(ax, label).get_xdata()) == phase2, key  # not drawn as 0 in Phase I
    # rates that do apply in Phase I keep it
    assert list(_line(axes[0], "skill use (share of trajectories)").get_xdata()) == list(range(1, STEPS + 1))
    assert list(_line(axes[1], "R=2: right with a skill").get_xdata()) == list(range(1, STEPS + 1))
    # the caption names every series
    for words in (
        "skill use",
        "gate pass",
        "gate target",
        "calibration_window",
        "R=1",
        "R=2",
        "both R=1 and R=2",
        "parsed",
        "trace_abstract",
        "not drawn there",
    ):
        assert words in f.caption, words


def test_coevolution_puts_accuracy_and_reward_on_separate_axes_with_wilson_intervals(drawn):
    f = drawn["figs"]["coevolution"]
    ax_acc, ax_rew, ax_lib = f.fig.axes
    acc = _line(ax_acc, "train accuracy")
    assert "train reward R (mean)" not in [ln.get_label() for ln in ax_acc.get_lines()]
    _line(ax_rew, "train reward R (mean)")
    assert ax_acc.get_ylim()[1] <= 1.1 and ax_rew.get_ylim()[1] >= 2.0  # reward goes to 2 in Phase II
    _line(ax_lib, "library entries (total)")
    band = [c for c in ax_acc.collections if "Wilson" in c.get_label()]
    assert len(band) == 1 and "n = queries" in band[0].get_label()
    verts = band[0].get_paths()[0].vertices
    for x, y in zip(acc.get_xdata(), acc.get_ydata(), strict=True):
        lo, hi = wilson_interval(y, QUERIES)
        at_x = verts[abs(verts[:, 0] - x) < 1e-9, 1]
        assert min(at_x) == pytest.approx(lo) and max(at_x) == pytest.approx(hi)
        assert lo < y < hi
    # the Phase I -> II drop (0.58 -> 0.34 on 4 queries) sits inside overlapping intervals
    assert wilson_interval(0.34, QUERIES)[1] > wilson_interval(0.58, QUERIES)[0]
    assert all(_phase_lines(ax) == [PHASE1 + 0.5] for ax in (ax_acc, ax_rew, ax_lib))
    assert "Wilson" in f.caption and "query" in f.caption


def test_utility_distribution_draws_the_phase_line_and_events_use_whole_number_ticks(drawn):
    ax_box = drawn["figs"]["utility_distribution"].fig.axes[0]
    assert _phase_lines(ax_box) == [PHASE1 + 0.5]
    assert [int(t) for t in ax_box.get_xticks()] == list(range(1, STEPS + 1))  # boxes at their steps
    ax_ev = drawn["figs"]["events"].fig.axes[0]
    ticks = ax_ev.get_yticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)


def test_skills_sharing_a_name_stay_apart_in_legends(drawn):
    lib = drawn["run"]["lib"]
    make_ten = [e.skill_id for e in lib.entries() if e.doc.skill_name == "make_ten"]
    assert len(make_ten) >= 2
    labels = _legend(drawn["figs"]["utility_trajectories"].fig.axes[0])
    assert len(set(labels)) == len(labels) == len(drawn["run"]["top_ids"])
    for sid in drawn["run"]["top_ids"]:
        assert sum(sid in lbl for lbl in labels) == 1
    assert sum("make_ten" in lbl for lbl in labels) >= 2


def test_utility_vs_uplift_shows_the_top_skill_with_negative_uplift(drawn):
    f = drawn["figs"]["utility_vs_uplift"]
    ax = f.fig.axes[0]
    lib = drawn["run"]["lib"]
    measured = [e for e in lib.entries() if e.uplift is not None]
    points = {}
    for c in ax.containers:  # one errorbar per tier
        xy = c.lines[0].get_xydata()
        segs = c.lines[2][0].get_segments()
        for (x, y), seg in zip(xy, segs, strict=True):
            points[(round(x, 9), round(y, 9))] = (seg[0][1], seg[1][1])
    assert len(points) == len(measured)
    for e in measured:
        lo, hi = points[(round(e.utility, 9), round(e.uplift, 9))]
        assert lo == pytest.approx(e.uplift - 1.96 * e.uplift_se) and hi == pytest.approx(e.uplift + 1.96 * e.uplift_se)
    top = max(measured, key=lambda e: e.utility)
    assert top.uplift < 0  # the run's top-utility skill does not help ...
    names = [t.get_text() for t in ax.texts]
    assert any(top.skill_id in t and top.doc.skill_name in t for t in names)  # ... and the plot says which it is
    assert _line(ax, "no uplift").get_ydata()[0] == 0.0
    assert ax.get_xlabel() == "utility (EMA)" and "uplift" in ax.get_ylabel()


def test_report_page_lists_every_figure_and_says_which_could_not_be_drawn(tmp_path):
    out = rep.build_report(build_tiny_run(tmp_path / "run"), tmp_path / "out")
    assert {"rates", "coevolution", "utility_distribution", "utility_vs_uplift"} <= set(out)
    html = out["html"].read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == len(out) - 1
    assert "Utility vs uplift" in html and "95% interval" in html
    bare = rep.build_report(build_tiny_run(tmp_path / "bare", checkpoint=False), tmp_path / "out_bare")
    assert "utility_vs_uplift" not in bare
    page = bare["html"].read_text(encoding="utf-8")
    assert f"not available: no checkpointed library at step {STEPS}" in page
