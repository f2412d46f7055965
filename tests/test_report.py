"""Tests of focus_tune.report: numbers, bolding, CSV, figures and missing-data handling."""

from __future__ import annotations

import copy
import csv
import math
import statistics
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from focus_tune.report import aggregate, write_report

L, N = 20, 50
CLASSES = ["healthy", "ill", "dead"]
SCHEDULES = {"none": "rest=0", "constant": "l1..100=0.01", "time-dependent": "l1=0.01 l2..6=0.005 rest=0"}

# Per family, the three seeds' values of every flat metric. Chosen so that each ranking rule
# picks a different family: ECE lowest -> time-dependent, AUC highest -> constant,
# coverage closest to 0.9 -> time-dependent (constant is higher but further), width lowest -> none.
VALUES = {
    "none": {
        "test/marginal/ece": [0.10, 0.12, 0.14],
        "test/marginal/auc": [0.70, 0.72, 0.71],
        "test/marginal/ce": [0.90, 0.95, 1.00],
        "test/marginal/brier": [0.20, 0.21, 0.22],
        "test/marginal/rmse": [0.18, 0.19, 0.185],
        "test/conditional/ece": [0.11, 0.13, 0.15],
        "test/conditional/auc": [0.66, 0.67, 0.68],
        "test/conditional/ce": [1.1, 1.2, 1.3],
        "test/conditional/brier": [0.25, 0.26, 0.24],
        "test/conditional/items": [31.0, 31.0, 31.0],
        "test/interval/coverage": [0.50, 0.55, 0.60],
        "test/interval/relative_width": [0.40, 0.42, 0.44],
        "test/interval/relative_mae": [0.30, 0.31, 0.29],
    },
    "constant": {
        "test/marginal/ece": [0.08, 0.09, 0.10],
        "test/marginal/auc": [0.75, 0.76, 0.74],
        "test/marginal/ce": [0.85, 0.86, 0.87],
        "test/marginal/brier": [0.19, 0.19, 0.20],
        "test/marginal/rmse": [0.17, 0.175, 0.18],
        "test/conditional/ece": [0.09, 0.10, 0.11],
        "test/conditional/auc": [0.70, 0.71, 0.69],
        "test/conditional/ce": [1.0, 1.05, 1.1],
        "test/conditional/brier": [0.23, 0.23, 0.24],
        "test/conditional/items": [31.0, 31.0, 31.0],
        "test/interval/coverage": [0.97, 0.99, 0.98],
        "test/interval/relative_width": [0.90, 0.95, 1.00],
        "test/interval/relative_mae": [0.28, 0.27, 0.26],
    },
    "time-dependent": {
        "test/marginal/ece": [0.05, 0.06, 0.04],
        "test/marginal/auc": [0.73, 0.74, 0.72],
        "test/marginal/ce": [0.80, 0.82, 0.81],
        "test/marginal/brier": [0.18, 0.185, 0.19],
        "test/marginal/rmse": [0.16, 0.17, 0.165],
        "test/marginal/leak": [0.02, 0.03, 0.025],
        "test/marginal/p_stay": [0.95, 0.96, 0.94],
        "test/conditional/ece": [0.07, 0.08, 0.06],
        "test/conditional/auc": [0.69, 0.70, 0.68],
        "test/conditional/ce": [0.95, 0.97, 0.96],
        "test/conditional/brier": [0.22, 0.21, 0.23],
        "test/conditional/items": [31.0, 31.0, 31.0],
        "test/interval/coverage": [0.85, 0.86, 0.84],
        "test/interval/relative_width": [0.70, 0.72, 0.71],
        "test/interval/relative_mae": [0.24, 0.25, 0.23],
    },
}
# The baselines: the oracle is best on nearly everything but, as a reference, never bolded;
# temperature-scaled is a model and is ranked (it has the best CE); image-blind has one row.
BASELINE_VALUES = {
    "temperature-scaled": {
        "test/marginal/ece": [0.06, 0.07, 0.08],
        "test/marginal/auc": [0.70, 0.72, 0.71],
        "test/marginal/ce": [0.70, 0.71, 0.72],
        "test/marginal/brier": [0.20, 0.21, 0.22],
        "test/interval/coverage": [0.80, 0.82, 0.81],
    },
    "image-blind": {
        "test/marginal/ece": [0.09],
        "test/marginal/auc": [0.50],
        "test/marginal/ce": [0.99],
        "test/interval/coverage": [0.90],
    },
    "oracle": {
        "test/marginal/ece": [0.02, 0.021, 0.019],
        "test/marginal/auc": [0.90, 0.91, 0.92],
        "test/marginal/ce": [0.50, 0.51, 0.52],
        "test/marginal/leak": [0.0, 0.0, 0.0],
        "test/interval/coverage": [0.90, 0.90, 0.90],
    },
}


def hand(values: list[float]) -> tuple[float, float]:
    """Mean and SE computed independently of the module (statistics.stdev has ddof=1)."""
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def per_entry(rng: np.random.Generator, shift: float) -> dict:
    """A test_per_entry dict of the trainable's shape: arrays, and lists as read back from a
    JSON file (None for NaN)."""
    ece = np.clip(shift + 0.01 * rng.standard_normal(L), 0, 1).tolist()
    ece[-1] = None
    true = rng.integers(1, L + 1, N).astype(float)
    lo = np.maximum(true - rng.integers(0, 6, N), 0)
    hi = lo + rng.integers(1, 10, N)
    reliability = {
        str(e): {"confidence": list(np.linspace(0.4, 0.95, 5)),
                 "accuracy": list(np.clip(np.linspace(0.4, 0.95, 5) - shift, 0, 1)),
                 "count": [10, 10, 10, 10, 10]}
        for e in (1, L // 4 + 1, L // 2 + 1)
    }
    metrics = {"ece": ece, "auc": rng.random(L), "brier": rng.random(L), "ce": rng.random(L)}
    return {
        "marginal": metrics,
        "conditional": {k: v[1:] for k, v in metrics.items()},
        "interval": {"lo": lo, "hi": hi, "point": (lo + hi) / 2, "true": true},
        "reliability": reliability,
    }


def make_finals(seeds: int = 3, with_baselines: bool = False) -> dict[str, list[dict]]:
    rng = np.random.default_rng(0)
    finals = {}
    for family, metrics in VALUES.items():
        shift = {"none": 0.1, "constant": 0.07, "time-dependent": 0.04}[family]
        finals[family] = [
            {**{k: v[s] for k, v in metrics.items()}, "seed": s, "epoch": 30,
             "test_per_entry": per_entry(rng, shift)}
            for s in range(seeds)
        ]
    if with_baselines:
        for family, metrics in BASELINE_VALUES.items():
            n = len(next(iter(metrics.values())))
            finals[family] = [
                {**{k: v[s] for k, v in metrics.items()}, "seed": None if n == 1 else s,
                 "test_per_entry": per_entry(rng, 0.02)}
                for s in range(n)
            ]
    return finals


def section(markdown: str, title: str) -> str:
    """The text of one '## ' section of the markdown."""
    start = markdown.index(f"## {title}")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:] if end < 0 else markdown[start:end]


def table_cells(markdown: str, title: str) -> dict[str, dict[str, str]]:
    """{family: {column label: cell}} of the table in a section."""
    lines = [ln for ln in section(markdown, title).splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def cell(values: list[float], bold: bool = False) -> str:
    mean, se = hand(values)
    head = f"**{mean:.4f}**" if bold else f"{mean:.4f}"
    return f"{head} ± {se:.4f}"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    report = write_report(out, "facemed", "smoke", make_finals(), SCHEDULES, CLASSES, 0)
    return out, report


def test_aggregate_is_nan_aware():
    mean, se = aggregate([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0) and se == pytest.approx(1 / math.sqrt(3))
    mean, se = aggregate([1.0, float("nan"), None, 3.0])
    assert mean == pytest.approx(2.0) and se == pytest.approx(1.0)
    mean, se = aggregate([0.25])
    assert mean == 0.25 and math.isnan(se)
    assert all(math.isnan(x) for x in aggregate([]))
    assert all(math.isnan(x) for x in aggregate([float("nan"), None]))


def test_markdown_means_and_standard_errors(full):
    _, report = full
    md = report.markdown
    marginal = table_cells(md, "Marginal")
    assert marginal["none"]["ECE"] == cell(VALUES["none"]["test/marginal/ece"])
    assert marginal["constant"]["AUC"] == cell(VALUES["constant"]["test/marginal/auc"], bold=True)
    assert marginal["none"]["RMSE to exact"] == cell(VALUES["none"]["test/marginal/rmse"])
    assert marginal["constant"]["CE"] == cell(VALUES["constant"]["test/marginal/ce"])
    assert marginal["time-dependent"]["BS"] == cell(VALUES["time-dependent"]["test/marginal/brier"], bold=True)
    assert marginal["time-dependent"]["leak"] == cell(VALUES["time-dependent"]["test/marginal/leak"])
    assert marginal["none"]["leak"] == "n/a"
    conditional = table_cells(md, "Conditional on entry 1 = healthy")
    assert conditional["time-dependent"]["ECE"] == cell(VALUES["time-dependent"]["test/conditional/ece"], bold=True)
    assert conditional["none"]["items"] == "31"
    interval = table_cells(md, "Time to event")
    assert interval["none"]["relative MAE"] == cell(VALUES["none"]["test/interval/relative_mae"])
    assert all(row["seeds"] == "n=3" for row in marginal.values())
    assert "`l1=0.01 l2..6=0.005 rest=0`" in section(md, "Chosen schedules")
    assert "ECE floor" not in md and "Baselines:" not in md  # no baseline rows here
    assert (full[0] / "results.md").read_text() == md


def test_bold_picks_the_best_family(full):
    md = full[1].markdown
    def bolded(title, column):
        return [f for f, row in table_cells(md, title).items() if "**" in row[column]]
    assert bolded("Marginal", "ECE") == ["time-dependent"]
    assert bolded("Marginal", "AUC") == ["constant"]
    assert bolded("Marginal", "leak") == []  # a diagnostic, not ranked
    assert bolded("Time to event", "coverage") == ["time-dependent"]  # closest to 0.9, not highest
    assert bolded("Time to event", "relative width") == ["none"]
    assert bolded("Conditional on entry 1", "items") == []


def test_csv_rows_means_and_se(full):
    out, _ = full
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 * (3 + 2)
    values = [r for r in rows if r["stat"] == "value"]
    assert [(r["family"], r["seed"]) for r in values[:3]] == [("none", "0"), ("none", "1"), ("none", "2")]
    assert float(values[4]["test/marginal/auc"]) == VALUES["constant"]["test/marginal/auc"][1]
    assert "epoch" in rows[0] and "test_per_entry" not in rows[0]
    for family, metrics in VALUES.items():
        mean_row = next(r for r in rows if r["family"] == family and r["stat"] == "mean")
        se_row = next(r for r in rows if r["family"] == family and r["stat"] == "se")
        for key, vals in metrics.items():
            mean, se = hand(vals)
            assert float(mean_row[key]) == pytest.approx(mean, abs=1e-12)
            assert float(se_row[key]) == pytest.approx(se, abs=1e-12)


def test_figures_are_valid_pngs(full):
    out, report = full
    names = {p.name for p in report.files}
    assert names == {"results.md", "results.csv", "entry_ece.png", "reliability.png", "intervals.png"}
    for name in ("entry_ece.png", "reliability.png", "intervals.png"):
        path = out / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] >= 300 and image.shape[1] >= 500
        assert image[..., :3].std() > 0.01  # not a blank canvas


def test_summary_and_plain_table(full):
    _, report = full
    s = report.summary
    assert s["time-dependent/test/marginal/ece"] == pytest.approx(0.05)
    assert s["none/test/interval/coverage"] == pytest.approx(0.55)
    assert not any(k.endswith("/epoch") for k in s)
    assert all(math.isfinite(v) for v in s.values())
    mean, se = hand(VALUES["none"]["test/marginal/ece"])
    lines = report.table.splitlines()
    none_rows = [ln for ln in lines if ln.startswith("none ")]
    assert len(none_rows) == 2  # one in the marginal block, one in the interval block
    assert f"{mean:.4f}±{se:.4f}" in none_rows[0]
    assert "coverage" in report.table and "**" not in report.table


def test_missing_keys_render_as_na(tmp_path):
    finals = make_finals()
    for row in finals["constant"]:
        for key in [k for k in row if k.startswith("test/conditional/")] + ["test/marginal/rmse"]:
            del row[key]
    finals["none"][1]["test/conditional/ece"] = float("nan")
    del finals["none"][2]["test_per_entry"]  # a result without per-entry data
    finals["constant"][0]["test_per_entry"] = None
    report = write_report(tmp_path, "facemed", "smoke", finals, SCHEDULES, CLASSES, 0)
    marginal = table_cells(report.markdown, "Marginal")
    conditional = table_cells(report.markdown, "Conditional")
    assert marginal["constant"]["RMSE to exact"] == "n/a"
    assert all(conditional["constant"][c] == "n/a" for c in ("ECE", "AUC", "CE", "BS", "items"))
    mean, se = hand([0.11, 0.15])
    assert conditional["none"]["ECE"] == f"{mean:.4f} ± {se:.4f} (n=2)"
    assert all((tmp_path / p.name).stat().st_size > 0 for p in report.files)


def test_keys_missing_everywhere(tmp_path):
    finals = copy.deepcopy(make_finals())
    for rows in finals.values():
        for row in rows:
            for key in [k for k in row if k.startswith("test/conditional/") or k.endswith(("rmse", "leak", "p_stay"))]:
                del row[key]
            row["test_per_entry"] = {"marginal": {"ece": [0.1] * L}}
    report = write_report(tmp_path, "hero", "quick", finals, SCHEDULES, ["NOOP", "FIRE"], 0)
    marginal = table_cells(report.markdown, "Marginal")
    assert "RMSE to exact" not in marginal["none"] and "leak" not in marginal["none"]
    assert "No conditional results" in report.markdown
    assert "entry 1 = NOOP" in report.markdown
    assert all(mpimg.imread(p).shape[0] > 100 for p in report.files if p.suffix == ".png")


def test_results_without_per_entry_data_draw_no_data(tmp_path, monkeypatch):
    from focus_tune.report import figures

    finals = make_finals()
    for rows in finals.values():
        for row in rows:
            del row["test_per_entry"]
    empty = []
    monkeypatch.setattr(figures, "no_data", lambda ax: empty.append(ax.figure))
    report = write_report(tmp_path, "facemed", "smoke", finals, SCHEDULES, CLASSES, 0)
    assert len(empty) == 3  # each of the three figures says 'no data'; the tables are whole
    assert table_cells(report.markdown, "Marginal")["none"]["ECE"] == cell(VALUES["none"]["test/marginal/ece"])
    assert all(mpimg.imread(p).shape[0] > 100 for p in report.files if p.suffix == ".png")


def test_one_seed_gives_n_equals_1(tmp_path):
    finals = make_finals(seeds=1)
    report = write_report(tmp_path, "facemed", "smoke", finals, SCHEDULES, CLASSES, 0)
    marginal = table_cells(report.markdown, "Marginal")
    assert marginal["none"]["seeds"] == "n=1"
    assert marginal["none"]["ECE"] == "0.1000"
    assert marginal["time-dependent"]["ECE"] == "**0.0500**"
    with (tmp_path / "results.csv").open() as fh:
        se = next(r for r in csv.DictReader(fh) if r["family"] == "none" and r["stat"] == "se")
    assert se["test/marginal/ece"] == ""


def test_family_without_seeds_is_skipped(tmp_path):
    finals = make_finals()
    finals["constant"] = []
    finals = {"time-dependent": finals["time-dependent"], "constant": [], "none": finals["none"]}
    report = write_report(tmp_path, "facemed", "smoke", finals, SCHEDULES, CLASSES, 0)
    marginal = table_cells(report.markdown, "Marginal")
    assert list(marginal) == ["none", "time-dependent"]  # the paper's order, whatever the input's
    assert "`constant` has no finished seed" in report.markdown
    assert not any(k.startswith("constant/") for k in report.summary)


@pytest.fixture(scope="module")
def with_baselines(tmp_path_factory):
    out = tmp_path_factory.mktemp("baselines")
    return out, write_report(out, "hero", "quick", make_finals(with_baselines=True), SCHEDULES, CLASSES, 0)


def test_baseline_rows_in_every_table(with_baselines):
    out, report = with_baselines
    md = report.markdown
    order = ["none", "constant", "time-dependent", "temperature-scaled", "image-blind", "oracle"]
    for title in ("Marginal", "Conditional", "Time to event"):
        assert list(table_cells(md, title)) == order
    marginal = table_cells(md, "Marginal")
    assert marginal["oracle"]["ECE"] == cell(BASELINE_VALUES["oracle"]["test/marginal/ece"])  # lowest, not bold
    assert marginal["image-blind"]["seeds"] == "n=1" and marginal["image-blind"]["ECE"] == "0.0900"
    assert marginal["temperature-scaled"]["CE"] == cell(BASELINE_VALUES["temperature-scaled"]["test/marginal/ce"],
                                                        bold=True)
    bolded = [f for f, row in marginal.items() if "**" in row["ECE"]]
    assert bolded == ["time-dependent"]  # the oracle (0.02) is a reference, not ranked
    assert table_cells(md, "Time to event")["oracle"]["coverage"] == "0.9000 ± 0.0000"
    assert "Rows. Every sampled row" in md and "oracle" in section(md, "Chosen schedules")
    for family in order[3:]:
        assert any(line.startswith(family) for line in report.table.splitlines()), family
    assert report.summary["oracle/test/marginal/ece"] == pytest.approx(0.02)
    assert report.summary["image-blind/test/marginal/auc"] == pytest.approx(0.50)


def test_baseline_rows_in_the_csv(with_baselines):
    out, _ = with_baselines
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:3] == ["family", "stat", "seed"]
    count = {f: sum(r["family"] == f for r in rows) for f in ("temperature-scaled", "image-blind", "oracle")}
    assert count == {"temperature-scaled": 3 + 2, "image-blind": 1 + 2, "oracle": 3 + 2}
    blind = [r for r in rows if r["family"] == "image-blind"]
    assert [r["stat"] for r in blind] == ["value", "mean", "se"] and blind[0]["seed"] == ""
    assert float(blind[1]["test/marginal/auc"]) == 0.5 and blind[2]["test/marginal/auc"] == ""
    oracle_mean = next(r for r in rows if r["family"] == "oracle" and r["stat"] == "mean")
    assert float(oracle_mean["test/marginal/ece"]) == pytest.approx(hand([0.02, 0.021, 0.019])[0])


def test_paired_test_against_hand_computed_values():
    from focus_tune.report import paired

    def rows(values, seeds=(0, 1, 2)):
        return [{"seed": s, "m": v} for s, v in zip(seeds, values)]

    # per-seed differences 1, 2, 3: mean 2, SD 1, t = 2 / (1 / sqrt 3) = 3.464, df = 2 -> p = 0.07418
    diff, p, n = paired(rows([2.0, 4.0, 6.0]), rows([1.0, 2.0, 3.0]), "m")
    assert (diff, n) == (pytest.approx(2.0), 3)
    assert p == pytest.approx(0.07418, abs=2e-5)
    # pairing is by seed, not by position; a seed on one side only is left out
    diff, p, n = paired(rows([6.0, 2.0, 4.0], seeds=(2, 0, 1)), rows([1.0, 2.0, 3.0, 9.0], seeds=(0, 1, 2, 3)), "m")
    assert (diff, n) == (pytest.approx(2.0), 3) and p == pytest.approx(0.07418, abs=2e-5)
    # the Welch test of the same numbers ignores the pairing and sees no difference
    from scipy import stats

    assert stats.ttest_ind([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], equal_var=False).pvalue > 0.2
    assert math.isnan(paired(rows([1.0]), rows([2.0]), "m")[1])  # one pair: no test
    assert paired(rows([1.0, float("nan"), 3.0]), rows([0.0, 1.0, 1.0]), "m")[2] == 2  # NaN: no pair
    assert math.isnan(paired(rows([2.0, 3.0]), rows([1.0, 2.0]), "m")[1])  # identical differences
    nan = pytest.approx(math.nan, nan_ok=True)
    assert paired(rows([]), rows([1.0]), "m") == (nan, nan, 0)


def test_detectable_difference_by_hand():
    from focus_tune.report.stats import detectable_difference

    # n = 3, df = 2: t_0.975 = 4.3027, t_0.8 = 1.0607; (4.3027 + 1.0607) / sqrt(3) = 3.0966
    assert detectable_difference(1.0, 3) == pytest.approx(3.0966, abs=1e-4)
    assert detectable_difference(0.5, 3) == pytest.approx(3.0966 / 2, abs=1e-4)
    assert detectable_difference(1.0, 10) < detectable_difference(1.0, 5) < detectable_difference(1.0, 3)
    assert math.isnan(detectable_difference(1.0, 1)) and math.isnan(detectable_difference(math.nan, 3))


def test_holm_adjustment_by_hand():
    from focus_tune.report import holm

    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    # sorted 0.01, 0.03, 0.04 (m = 3): 3 * 0.01, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert adjusted["a"] == pytest.approx(0.03) and adjusted["c"] == pytest.approx(0.06)
    assert adjusted["b"] == pytest.approx(0.06) and math.isnan(adjusted["d"])
    assert holm({"a": 0.6, "b": 0.7}) == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert holm({}) == {}


def test_differences_section_and_summary(full):
    from scipy import stats

    _, report = full
    diff_rows = [line for line in section(report.markdown, "Differences from `none`").splitlines()
                 if line.startswith("| time-dependent |") or line.startswith("| constant |")]
    assert len(diff_rows) == 4 and all(", Holm " in row for row in diff_rows[:2])  # then the detectable table
    assert "What these seeds can detect" in section(report.markdown, "Differences from `none`")
    finals = make_finals()
    ece = {fam: {r["seed"]: r["test/marginal/ece"] for r in finals[fam]} for fam in ("none", "time-dependent")}
    seeds = sorted(ece["none"])
    p = report.summary["time-dependent/test/marginal/ece/paired_p_vs_none"]
    assert p == pytest.approx(stats.ttest_rel([ece["time-dependent"][s] for s in seeds],
                                              [ece["none"][s] for s in seeds]).pvalue)
    holm_p = report.summary["time-dependent/test/marginal/ece/holm_p_vs_none"]
    ps = [v for k, v in report.summary.items() if k.endswith("/paired_p_vs_none")]
    assert p <= holm_p <= min(1.0, len(ps) * p) + 1e-12


def test_differences_from_a_results_csv(full, capsys):
    from focus_tune.report import main

    out, report = full
    assert main([str(out / "results.csv")]) == 0
    printed = capsys.readouterr().out
    expected = section(report.markdown, "Differences from `none`").strip()
    assert printed.strip() == expected


def test_every_report_file_is_written_atomically(tmp_path, monkeypatch):
    import sys

    from focus_tune.durable import write_atomic

    written = []

    def recording(path, data):
        written.append(Path(path).name)
        write_atomic(path, data)

    writers = [m for name, m in sys.modules.items()
               if name.startswith("focus_tune.report.") and hasattr(m, "write_atomic")]
    assert writers
    for module in writers:
        monkeypatch.setattr(module, "write_atomic", recording)
    report = write_report(tmp_path, "facemed", "smoke", make_finals(), SCHEDULES, CLASSES, 0)
    assert sorted(written) == sorted(f.name for f in report.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(written)  # no temporary file left


def test_signed_columns_rank_by_distance_from_zero_and_groups_get_a_table(tmp_path):
    finals = make_finals(seeds=2)
    debiased = {"none": [0.03, 0.03], "constant": [-0.004, -0.002], "time-dependent": [0.006, 0.008]}
    for family, rows in finals.items():
        for row, value in zip(rows, debiased[family]):
            row["test/marginal/ece_debiased"] = value
            row["test/interval/coverage_age_under_40"] = 0.95
            row["test/interval/coverage_age_over_80"] = {"none": 0.5, "constant": 0.7, "time-dependent": 0.85}[family]
    report = write_report(tmp_path, "facemed", "smoke", finals, SCHEDULES, CLASSES, 0)
    marginal = table_cells(report.markdown, "Marginal")
    assert marginal["constant"]["ECE debiased"].startswith("**-0.0030**")  # |-0.003| is the smallest
    groups = table_cells(report.markdown, "Coverage of I_0.9 by group")
    assert groups["time-dependent"]["age over 80"].startswith("**0.8500**") and "age under 40" in groups["none"]
    assert "ECE-db" in report.table  # the printed table shows the optional column where it has values
    assert "IS" not in report.table.split("Time to event")[1].split("\n")[1]  # and hides it where none does


def test_label_noise_paragraph_from_the_exact_row():
    from focus_tune.report.markdown import label_noise_lines
    from focus_tune.scoring.metrics import LABEL_SD_KEYS

    assert label_noise_lines({"none": [{"seed": 0}]}) == []  # no exact row: no paragraph
    assert label_noise_lines({"exact": [{"seed": None, "test/marginal/ece": 0.01}]}) == []  # no keys
    row = {"seed": None, LABEL_SD_KEYS[0]: 0.0013, LABEL_SD_KEYS[1]: 1.44e-4}
    text = " ".join(label_noise_lines({"exact": [row]}))
    assert "SD 0.0013" in text and "SD 1.4e-04" in text and "0 ± 0.0120" in text  # sqrt(1.44e-4)



def test_schedule_table_shows_the_temperature_of_each_seed():
    from focus_tune.report.markdown import _schedule_lines

    rows = [{"seed": 0, "test/temperature_pooled": 1.0}, {"seed": 1, "test/temperature_pooled": 0.9}]
    lines = _schedule_lines(["none", "temperature-scaled"], {"none": [{"seed": 0}], "temperature-scaled": rows},
                            {"none": "all=0"})
    scaled = next(line for line in lines if line.startswith("| temperature-scaled |"))
    assert "T per seed: 1, 0.9`" in scaled and "n=2" in scaled
    assert "T per seed" not in next(line for line in lines if line.startswith("| none |"))


def test_t_test_and_quantile_equal_scipy_stats():
    """The report's Student's t (scipy.special, cheaper to import) against scipy.stats itself."""
    from scipy import stats

    from focus_tune.report.stats import one_sample_test, t_quantile

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 30):
        for shift in (0.0, 0.3, 3.0):
            d = rng.normal(shift, 1.0, n)
            mean, p = one_sample_test(d)
            assert mean == d.mean()
            assert p == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue, rel=1e-12, abs=1e-300)
            for q in (0.8, 0.975):
                assert t_quantile(q, n - 1) == stats.t.ppf(q, n - 1)
    assert math.isnan(one_sample_test(np.array([0.2, 0.2, 0.2]))[1])  # no spread: no test


def test_a_report_does_not_import_scipy_stats(tmp_path):
    """scipy.stats costs about a CPU-second to import, in every search's driver: the report
    (tables, paired tests, figures) does without it."""
    import subprocess
    import sys

    code = ("import sys, math; from focus_tune.report.stats import one_sample_test, detectable_difference; "
            "import numpy as np; one_sample_test(np.array([0.1, 0.3, 0.2])); detectable_difference(1.0, 3); "
            "from focus_tune.replicate.analysis import t_interval; t_interval(np.array([0.1, 0.3, 0.2])); "
            "import focus_tune.report; print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_conformal_rows_leave_the_model_tables_unchanged(tmp_path):
    """'+conformal' rows (split off the finals by baselines.split_conformal) get a section and
    a plain table of their own; every other section, the printed tables before theirs and the
    csv rows of the models are those of the same finals without them."""
    from focus_tune.names import CONFORMAL_PREFIX, TS_CONFORMAL_PREFIX
    from focus_tune.scoring.baselines import split_conformal

    plain = make_finals(with_baselines=True)
    extended = make_finals(with_baselines=True)
    for family in ("none", "constant", "time-dependent"):
        for s, row in enumerate(extended[family]):
            row[CONFORMAL_PREFIX + "interval/coverage"] = 0.9 + 0.01 * s
            row[CONFORMAL_PREFIX + "interval/relative_width"] = 1.5
            row[CONFORMAL_PREFIX + "interval/conformal_level"] = 0.95
            row[CONFORMAL_PREFIX + "interval/conformal_items"] = 250.0
            if family == "none":
                row[TS_CONFORMAL_PREFIX + "interval/coverage"] = 0.91
    extended = split_conformal(extended)
    assert [f for f in extended if f.endswith("+conformal")] == [
        "none +conformal", "temperature-scaled +conformal", "constant +conformal", "time-dependent +conformal"]
    assert all(not any(k.startswith(("conformal/", "temperature-scaled/conformal/")) for k in row)
               for rows in extended.values() for row in rows)
    a = write_report(tmp_path / "a", "hero", "quick", plain, SCHEDULES, CLASSES, 0)
    b = write_report(tmp_path / "b", "hero", "quick", extended, SCHEDULES, CLASSES, 0)
    title = "Time to event, I_0.9 calibrated by split conformal"
    assert title not in a.markdown and b.markdown.replace(section(b.markdown, title) + "\n", "") == a.markdown
    cells = table_cells(b.markdown, title)
    assert list(cells) == ["none", "none +conformal", "constant", "constant +conformal", "time-dependent",
                           "time-dependent +conformal", "temperature-scaled", "temperature-scaled +conformal"]
    assert cells["none +conformal"]["coverage"] == cell([0.9, 0.91, 0.92], bold=True)
    assert cells["none +conformal"]["calibrated level"] == "0.950 ± 0.000"
    assert cells["none"]["calibrated level"] == "n/a"
    assert "(250 items)" in section(b.markdown, title) and "SD about 0.019 at 250 items" in section(b.markdown, title)
    assert b.table.startswith(a.table) and title in b.table[len(a.table):]
    with (tmp_path / "a" / "results.csv").open() as fa, (tmp_path / "b" / "results.csv").open() as fb:
        old, new = list(csv.DictReader(fa)), list(csv.DictReader(fb))
    assert [{k: r[k] for k in old[0]} for r in new[:len(old)]] == old  # the models' rows as before
    assert {r["family"] for r in new[len(old):]} == {f for f in extended if f.endswith("+conformal")}
    assert b.summary["none +conformal/test/interval/coverage"] == pytest.approx(0.91)
    for png in ("entry_ece.png", "reliability.png", "intervals.png"):
        assert (tmp_path / "a" / png).read_bytes() == (tmp_path / "b" / png).read_bytes()


def test_the_intervals_legend_covers_no_data(tmp_path, monkeypatch):
    """intervals.png's legend sits outside the axes (the points fill the panel), and the panel
    keeps its size: the figure grows by the legend."""
    from focus_tune.report import figures

    drawn = {}

    def keep(fig, path):
        fig.tight_layout()
        fig.canvas.draw()
        drawn["fig"] = fig
        return path

    monkeypatch.setattr(figures, "save_png", keep)
    finals = make_finals()
    figures.plot_intervals(tmp_path / "intervals.png", list(finals), finals, "hero quick")
    fig = drawn["fig"]
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None and len(legend.get_texts()) == len(finals)
    box, panel = legend.get_window_extent(), ax.get_window_extent()
    assert box.y1 <= panel.y0 and not box.overlaps(panel)  # below the axes, clear of them
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1  # and inside the figure
    assert panel.height / fig.dpi > 3.6  # the panel as tall as before the legend moved out (3.66 in)


def test_a_degenerate_paired_test_is_flagged():
    """temperature-scaled identical to none on 2 of 3 seeds (T = 1 there): every metric's
    paired p reads 0.423 (t = 1); its cells are marked and a note under the table names the
    family, how many seeds and which; the other families' cells are not marked."""
    from focus_tune.report.markdown import DEGENERATE_MARK, difference_lines

    finals = make_finals()
    scaled = copy.deepcopy(finals["none"])
    for key in list(scaled[2]):
        if key.startswith("test/") and isinstance(scaled[2][key], float):
            scaled[2][key] *= 0.9
    finals["temperature-scaled"] = scaled
    lines = difference_lines(list(finals), finals)
    table = lines[:lines.index(next(line for line in lines if line.startswith("What these seeds")))]
    row = next(line for line in table if line.startswith("| temperature-scaled |"))
    cells = row.strip("|").split("|")[1:]
    assert cells and all(f"(p = 0.423{DEGENERATE_MARK}, Holm" in c for c in cells), row
    for family in ("constant", "time-dependent"):
        assert DEGENERATE_MARK not in next(line for line in table if line.startswith(f"| {family} |"))
    notes = [line for line in table if line.startswith(DEGENERATE_MARK)]
    assert len(notes) == 1
    assert ("Degenerate paired test: 2 of the 3 seeds of temperature-scaled (seed 0, 1) are identical to none's "
            "on every metric (T = 1 there" in notes[0])
    assert "p = 0.423 with 3 seeds" in notes[0]

    finals["temperature-scaled"] = [{**r, "test/marginal/ece": r["test/marginal/ece"] + 0.01 * (r["seed"] + 1)}
                                    for r in finals["none"]]  # differs on one metric on every seed: no flag
    lines = difference_lines(list(finals), finals)
    assert not any(DEGENERATE_MARK in line for line in lines)


def test_a_time_dependent_temperature_row_is_split_off_none_and_shows_its_temperatures():
    """A 'none' final reports both temperature rows under their prefixes; the report makes each
    a row of its own (with its +conformal row) and the chosen-schedules table names every T."""
    from focus_tune.report.markdown import chosen_temperatures
    from focus_tune.scoring.baselines import split_conformal, split_temperature_scaled
    from focus_tune.search.outputs import posthoc_costs

    none = [{"seed": s, "test/marginal/ece": 0.05, "temperature-scaled/test/marginal/ece": 0.04,
             "temperature-scaled/test/temperature_pooled": 1.1,
             "time-dependent temperature/test/marginal/ece": 0.03,
             "time-dependent temperature/test/temperature_pooled": 0.9,
             **{f"time-dependent temperature/test/temperature_{i}": 1.25 for i in (1, 2, 3)},
             "time-dependent temperature/conformal/test/interval/coverage": 0.9} for s in (0, 1)]
    rows = split_conformal({"none": none})
    assert [r["test/interval/coverage"] for r in rows["time-dependent temperature +conformal"]] == [0.9, 0.9]
    own, scaled = split_temperature_scaled(rows["none"])
    own, staged = split_temperature_scaled(own, "time-dependent temperature/test/")
    assert [r["test/marginal/ece"] for r in own] == [0.05, 0.05] and staged[0]["test/marginal/ece"] == 0.03
    assert chosen_temperatures(scaled[0]) == "1.1"
    assert chosen_temperatures(staged[0]) == "1.25/1.25/1.25/rest 0.9"
    assert chosen_temperatures({"test/marginal/ece": 0.05}) == ""
    costs = posthoc_costs({"final-none-s0": {"temperature-scaled": 2.0, "time-dependent temperature": 9.0},
                           "final-none-s1": {"temperature-scaled": 4.0, "time-dependent temperature": 11.0}})
    assert costs == {"temperature-scaled": {"mean": 3.0, "finals": 2},
                     "time-dependent temperature": {"mean": 10.0, "finals": 2}}
