"""Ray Tune's own tools as the docs show them, on the session's smoke search, from its working
folder and with the docs' relative paths: docs/CONFIG.md's lines (ExperimentAnalysis, the
search's choice from the finals and report/search.json, get_best_trial) and README's and
GUIDE's one-liners."""

import json
import os
import re
from pathlib import Path

import pytest

from smoke_search import RUN

ROOT = Path(__file__).resolve().parents[1]
SHOWN = "runs/hero-quick-seed0"


def tune_block() -> str:
    """The python block of docs/CONFIG.md that reads a search with Ray Tune."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "CONFIG.md").read_text(), re.S)
    (block,) = [b for b in blocks if "ExperimentAnalysis" in b]
    return block


@pytest.fixture
def in_work(smoke_search):
    before = os.getcwd()
    os.chdir(smoke_search.work)
    try:
        yield smoke_search.work
    finally:
        os.chdir(before)


def test_configs_tune_lines_run_as_written_and_pick_the_searchs_choice(in_work, capsys):
    code = tune_block()
    assert SHOWN in code
    scope: dict = {}
    exec(compile(code.replace(SHOWN, f"runs/{RUN}"), "docs/CONFIG.md", "exec"), scope)
    df, chosen, best = scope["df"], scope["chosen"], scope["best"]
    search = json.loads((in_work / "runs" / RUN / "report" / "search.json").read_text())
    assert set(df["config/trial/role"]) == {"candidate", "final"}
    assert (df.loc[df["config/trial/stage"] == "final", "config/trial/role"] == "final").all()
    assert len(chosen) == 3 and set(chosen["config/trial/schedule"]) == {search["chosen"]["time-dependent"]}
    assert chosen["test/marginal/ece"].notna().all()
    printed = capsys.readouterr().out
    assert printed.startswith(search["chosen"]["time-dependent"] + " ")
    picked = set(df.loc[df["chosen"], "config/trial/trial_id"])
    assert picked and picked <= set(df.loc[df["config/trial/role"] == "candidate", "config/trial/trial_id"])
    assert {c["trained_as"] for s in search["stages"] for c in s["candidates"]
            if c["trial_id"] == s["winner"]} == picked
    assert best.last_result["val/ece"] == pytest.approx(df["val/ece"].min())


def test_readme_and_guide_one_liners_run_and_a_relative_path_is_what_tune_refuses(in_work):
    from pathlib import Path  # noqa: F401  (the one-liners' own import)

    import ray.tune

    for page in ("README.md", "docs/GUIDE.md"):
        text = (ROOT / page).read_text().replace("\n", " ")
        (line,) = set(re.findall(r"`(ray\.tune\.ExperimentAnalysis\(.*?\)\.dataframe\(\))`", text))
        df = eval(line.replace(SHOWN, f"runs/{RUN}"), {"ray": ray, "Path": Path})
        assert len(df) > 10 and "config/trial/role" in df.columns, page
    with pytest.raises(Exception, match="empty scheme"):  # why the docs resolve the path
        ray.tune.ExperimentAnalysis(f"runs/{RUN}/search")
