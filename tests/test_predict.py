"""python -m focus_tune.predict: a searched model's probabilities, intervals and figures for
new images, loaded through MLflow (the session's smoke search) or from a folder; and the
errors a user meets (a model URI that does not exist, an image it cannot read)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from focus_tune import predict
from focus_tune.sim.model import Simulator
from focus_tune.sim.model_io import save_model

CLASSES = ["a", "b", "c", "dead"]
L = 12
TRAIN = {"encoder": "small", "embed_dim": 16, "hidden": 16, "encoder_width": 64, "event_sampling": "model",
         "alpha": 0.9}
INFO = {"num_classes": 4, "event": 3, "condition_class": 0, "in_channels": 3}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = predict.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _png(path: Path, array: np.ndarray) -> Path:
    Image.fromarray(np.ascontiguousarray(array.transpose(1, 2, 0))).save(path)
    return path


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A small random simulator saved as a search saves its final models (model.json + weights.npz)."""
    torch.manual_seed(0)
    model = Simulator(4, encoder="small", embed_dim=16, hidden=16)
    return save_model(tmp_path / "model", model, TRAIN, INFO,
                      extra={"family": "time-dependent", "class_names": CLASSES, "length": L,
                             "image_shape": [3, 16, 16]})


@pytest.fixture
def images(tmp_path) -> list[Path]:
    rng = np.random.default_rng(0)
    folder = tmp_path / "imgs"
    folder.mkdir()
    return [_png(folder / f"img{i}.png", rng.integers(0, 256, (3, 16, 16), dtype=np.uint8)) for i in range(2)]


def _check(result: dict, length: int, classes: list[str], samples: int) -> None:
    p = np.asarray(result["marginals"])
    assert p.shape == (length, len(classes))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    if result["estimator"] == "counted":
        frac = (p * samples) % 1
        assert np.minimum(frac, 1 - frac).max() < 1e-6, "frequencies of M samples"
    else:
        assert result["estimator"] == "rao_blackwell"
    assert result["class_names"] == classes
    tte = result["time_to_event"]
    assert 1 <= tte["lower"] <= tte["upper"] <= length
    assert 1 <= tte["mean"] <= length and len(tte["distribution"]) == length
    assert sum(tte["distribution"]) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- a folder model, fast


def test_folder_model_json_parquet_and_figures(tiny, images, tmp_path, capsys):
    big = _png(tmp_path / "big.png", np.full((3, 40, 48), 200, dtype=np.uint8))
    code, out, err = run(capsys, "--model", tiny, images[0].parent, big, "--json", "-M", 40, "--prefix", "b",
                         "--figures", tmp_path / "figs", "--parquet", tmp_path / "p.parquet")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["input"] for r in results] == [str(images[0]), str(images[1]), str(big)]
    for r in results:
        _check(r, L, CLASSES, 40)
        cond = r["conditional"]
        assert cond["prefix"] == ["b"]
        q = np.asarray(cond["marginals"])
        assert q[0, 1] == 1.0 and np.allclose(q.sum(axis=1), 1.0)
    assert results[2]["image_note"] == "resized from 48x40 to 16x16"
    figures = sorted((tmp_path / "figs").glob("*.png"))
    assert len(figures) == 3
    assert mpimg.imread(figures[0])[..., :3].std() > 0.05
    table = pq.read_table(tmp_path / "p.parquet")
    assert table.num_rows == 3
    assert np.asarray(table.column("marginals")[0].as_py()).shape == (L, 4)
    assert table.column("tte_lower").to_pylist() == [r["time_to_event"]["lower"] for r in results]
    assert json.loads(table.schema.metadata[b"focus_tune.class_names"]) == CLASSES


def test_estimators_rao_blackwell_by_default_counted_on_request(tiny, images, capsys):
    """Both estimators use the same draws (same seed): the counted one is their frequencies, the
    default averages the model's conditionals along them; the prefix's entry is one-hot in both."""
    from focus_tune.scoring import montecarlo
    from focus_tune.scoring.evaluation import draw_samples

    _, rb, _ = run(capsys, "--model", tiny, images[0], "--json", "-M", 30, "--prefix", "b", "--seed", 2)
    _, counted, _ = run(capsys, "--model", tiny, images[0], "--json", "-M", 30, "--prefix", "b", "--seed", 2,
                        "--estimator", "counted")
    rb, counted = json.loads(rb), json.loads(counted)
    assert (rb["estimator"], counted["estimator"]) == ("rao_blackwell", "counted")
    loaded = predict.load(str(tiny))
    item = predict.collect([str(images[0])], loaded.image_shape)[0]
    gen = torch.Generator().manual_seed(predict.image_seed(2, item.image))
    drawn = draw_samples(loaded.model, torch.as_tensor(item.image[None]), 30, L, gen, None, rao_blackwell=3)
    samples, marginals, pmf = drawn.samples, drawn.marginals, drawn.time_pmf
    np.testing.assert_allclose(rb["marginals"], marginals[0].numpy(), atol=1e-12)
    np.testing.assert_allclose(counted["marginals"], montecarlo.marginal_probs(samples, 4)[0], atol=1e-12)
    np.testing.assert_allclose(rb["time_to_event"]["distribution"], pmf[0].numpy(), atol=1e-12)
    assert rb["time_to_event"]["mean"] == pytest.approx(float(pmf[0].numpy() @ np.arange(1, L + 1)))
    assert rb["time_to_event"]["p_event_within_length"] == counted["time_to_event"]["p_event_within_length"]
    for r in (rb, counted):
        assert r["conditional"]["marginals"][0] == [0.0, 1.0, 0.0, 0.0]
        _check(r, L, CLASSES, 30)


def test_an_image_gets_the_same_numbers_whatever_comes_with_it(tiny, images, capsys):
    _, one, _ = run(capsys, "--model", tiny, images[1], "--json", "--seed", 3)
    _, both, _ = run(capsys, "--model", tiny, images[0], images[1], "--json", "--seed", 3)
    assert json.loads(one) == json.loads(both.splitlines()[1])
    _, other, _ = run(capsys, "--model", tiny, images[1], "--json", "--seed", 4)
    assert json.loads(other)["marginals"] != json.loads(one)["marginals"]


def test_terminal_summary(tiny, images, capsys):
    code, out, _ = run(capsys, "--model", tiny, images[0], "--bands", 3, "--top", 2, "--prefix", "a")
    assert code == 0
    assert out.startswith(f"model: {tiny} (time-dependent) | 4 classes, L = 12, images 3x16x16 | M = 100, seed 0")
    assert "    1-4      " in out and "    9-12     " in out
    assert "time to dead: I_0.9 = [" in out and "P(dead within 12 entries) = " in out
    assert "given entries 1..1 = a:" in out and "    2-5      " in out


@pytest.mark.parametrize("make, flags, message", [
    (lambda d: d.joinpath("x.png").write_text("not an image") and d / "x.png", (), "not a readable image"),
    (lambda d: _png(d / "x.png", np.zeros((3, 20, 20), np.uint8)), ("--no-resize",),
     "20x20 pixels, the model reads 16x16 (drop --no-resize to resize it)"),
    (lambda d: np.save(d / "x.npy", np.zeros((4, 16, 16), np.uint8)) or d / "x.npy", (),
     "4 channel(s), the model reads 3"),
    (lambda d: np.save(d / "x.npy", np.zeros((3, 16, 16), np.float32)) or d / "x.npy", (),
     "expected uint8 pixels"),
    (lambda d: d / "missing.png", (), "missing.png: no such file or folder"),
    (lambda d: (d / "empty").mkdir() or d / "empty", (), "no image files in it"),
    (lambda d: _png(d / "x.png", np.zeros((3, 16, 16), np.uint8)), ("--prefix", "zebra"), "'zebra' is not a class"),
    (lambda d: _png(d / "x.png", np.zeros((3, 16, 16), np.uint8)), ("--alpha", "1.5"), "expected a level in (0, 1)"),
])
def test_bad_input_is_refused_with_one_line(tiny, tmp_path, capsys, make, flags, message):
    target = make(tmp_path)
    code, out, err = run(capsys, "--model", tiny, target, *flags)
    assert code == 2 and message in err and err.startswith("error: ") and err.count("\n") == 1, err


def test_items_of_a_dataset_folder():
    assert predict.parse_items(None, 24) == [0, 1, 2, 3, 4]
    assert predict.parse_items(None, 3) == [0, 1, 2], "the default never runs past a small split"
    assert predict.parse_items("2-4,0,3", 10) == [2, 3, 4, 0]
    assert predict.parse_items("all", 3) == [0, 1, 2]
    for bad, message in (("9", "index 9 is out of range (the split has 5 items)"), ("4-2", "runs backwards"),
                         ("x", "expected indices like 0-4,9")):
        with pytest.raises(predict.PredictError, match=re.escape(message)):
            predict.parse_items(bad, 5)


def test_an_hwc_npy_image_of_another_size_is_resized(tiny, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.full((20, 24, 3), 7, np.uint8))  # [H, W, C]
    code, out, err = run(capsys, "--model", tiny, tmp_path / "x.npy", "--json", "-M", 8)
    assert code == 0, err
    assert json.loads(out)["image_note"] == "resized from 24x20 to 16x16"


def test_missing_model_folder_and_family(tiny, tmp_path, images, capsys):
    code, _, err = run(capsys, "--model", tmp_path / "nowhere", images[0])
    assert code == 2 and "no such folder, and not an MLflow URI" in err
    run_dir = tmp_path / "run"
    shutil.copytree(tiny, run_dir / "models" / "none")
    code, _, err = run(capsys, "--model", run_dir, images[0])
    assert code == 2 and "has no 'time-dependent' model; it has: none (--family)" in err
    code, out, err = run(capsys, "--model", run_dir, "--family", "none", images[0], "--json", "-M", 8)
    assert code == 0 and json.loads(out)["family"] == "time-dependent"  # what the copied model.json says


def test_model_uri_in_a_store_that_does_not_exist(images, tmp_path, capsys):
    db = tmp_path / "none.db"
    code, _, err = run(capsys, "--model", "runs:/0123/model-time-dependent", "--tracking-uri", f"sqlite:///{db}",
                       images[0])
    assert code == 2 and f"no MLflow store at {db}" in err
    assert not db.exists(), "a wrong --tracking-uri does not create an empty store"


# ----------------------------------------------------------------------------- the smoke search's models


@pytest.fixture(scope="module")
def searched(smoke_search, tmp_path_factory):
    """The smoke search's parent run, its store and dataset, and two test images as PNG files."""
    from mlflow.tracking import MlflowClient

    from focus_tune.data import load_dataset
    from smoke_search import GAME

    work = smoke_search.work
    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(f"focus-tune/{GAME}")
    parent = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") == "search")
    data = Path(parent.data.params["data"])
    ds = load_dataset(data)
    folder = tmp_path_factory.mktemp("frames")
    pngs = [_png(folder / f"test{i}.png", ds.test.images[i]) for i in range(2)]
    models = {m.name: m.model_id for m in client.search_logged_models(
        [exp.experiment_id], filter_string=f"source_run_id = '{parent.info.run_id}'")}
    return {"work": work, "uri": uri, "run": parent.info.run_id, "data": data, "manifest": ds.manifest,
            "pngs": pngs, "models": models}


@pytest.mark.slow
def test_predict_through_the_mlflow_uri_of_the_search(searched, tmp_path, capsys):
    m = searched["manifest"]
    cond = m.class_names[m.condition_class]
    code, out, err = run(capsys, "--model", f"runs:/{searched['run']}/model-time-dependent",
                         "--tracking-uri", searched["uri"], *searched["pngs"], "--json", "--prefix", cond,
                         "--figures", tmp_path / "figs", "--parquet", tmp_path / "out.parquet")
    assert code == 0, err
    results = [json.loads(line) for line in out.splitlines()]
    assert len(results) == 2
    for r in results:
        _check(r, m.length, list(m.class_names), 100)
        assert r["family"] == "time-dependent" and r["event"] == m.class_names[m.event_class]
        assert r["conditional"]["prefix"] == [cond]
        c = r["conditional"]["time_to_event"]
        assert 1 <= c["lower"] <= c["upper"] <= m.length
    figures = sorted((tmp_path / "figs").glob("*.png"))
    assert [f.stem.rsplit("_", 1)[-1] for f in figures] == ["test0", "test1"]
    assert all(mpimg.imread(f)[..., :3].std() > 0.05 for f in figures)
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 2

    # The same model by its logged-model id, and from the run folder: the same numbers.
    model_id = searched["models"]["model-time-dependent"]
    _, by_id, _ = run(capsys, "--model", f"models:/{model_id}", "--tracking-uri", searched["uri"],
                      searched["pngs"][0], "--json", "--prefix", cond)
    _, by_folder, _ = run(capsys, "--model", searched["work"] / "runs" / "facemed-smoke-seed0",
                          searched["pngs"][0], "--json", "--prefix", cond)
    for other in (json.loads(by_id), json.loads(by_folder)):
        assert other["marginals"] == results[0]["marginals"]
        assert other["time_to_event"] == results[0]["time_to_event"]


@pytest.mark.slow
def test_dataset_items_come_with_their_truth(searched, capsys):
    code, out, err = run(capsys, "--model", f"runs:/{searched['run']}", "--family", "none",
                         "--tracking-uri", searched["uri"], searched["data"], "--items", "0-2", "-M", 30)
    assert code == 0, err
    assert out.count("truth: T = ") == 3 and "RMSE to the exact marginals" in out
    assert "dataset items: 3; I_0.9 covers the true T of " in out
    assert "(none, trained as none-s0)" in out


@pytest.mark.slow
def test_missing_uri_says_so_without_a_traceback(searched, capsys):
    # As a user runs it: one line on stderr, exit status 2, nothing on stdout.
    proc = subprocess.run([sys.executable, "-m", "focus_tune.predict",
                           "--model", "runs:/0123456789abcdef/model-time-dependent",
                           "--tracking-uri", searched["uri"], str(searched["pngs"][0])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"error: --model runs:/0123456789abcdef/model-time-dependent: no MLflow run "
                           f"'0123456789abcdef' in {searched['uri']}\n"), proc.stderr
    cases = {
        f"runs:/{searched['run']}/model-bogus": "has no model 'model-bogus'; it has: model-constant, model-none, "
                                                 "model-time-dependent",
        "models:/m-00000000000000000000000000000000": "no logged model 'm-00000000000000000000000000000000'",
        "models:/focus-hero/3": "no registered model 'focus-hero/3'",
    }
    for uri, message in cases.items():
        code, out, err = run(capsys, "--model", uri, "--tracking-uri", searched["uri"], searched["pngs"][0])
        assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_a_model_saved_without_its_metadata_uses_the_dataset(searched, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(searched["work"] / "runs" / "facemed-smoke-seed0" / "models" / "constant", old)
    meta = json.loads((old / "model.json").read_text())
    for key in ("class_names", "length", "image_shape"):
        meta.pop(key)
    (old / "model.json").write_text(json.dumps(meta))
    code, _, err = run(capsys, "--model", old, searched["pngs"][0])
    assert code == 2 and "pass --data DATASET_DIR" in err
    code, out, err = run(capsys, "--model", old, "--data", searched["data"], searched["pngs"][0], "--json", "-M", 10)
    assert code == 0, err
    _check(json.loads(out), searched["manifest"].length, list(searched["manifest"].class_names), 10)


def test_a_model_that_leaks_out_of_the_event_is_warned_about_once(tiny, images, tmp_path, capsys):
    """The random tiny model leaves `dead` after reaching it: one warning line for the run (not
    one per image) saying the event is not kept absorbing; JSON output keeps it off stdout; a
    model whose sampler forces the event (train.event_sampling: forced) never leaks: no warning."""
    code, out, _ = run(capsys, "--model", tiny, *images)
    assert code == 0
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, out
    assert "the model does not keep dead absorbing" in warnings[0] and "above 5% for 2 of 2 image(s)" in warnings[0]
    assert "the probabilities of the entries after it are the model's, not a process's" in warnings[0]
    code, out, err = run(capsys, "--model", tiny, "--json", images[0])
    assert code == 0 and "warning:" not in out and err.count("warning: the model does not keep dead") == 1
    result = json.loads(out.splitlines()[0])
    assert 0.05 < result["time_to_event"]["leak"] <= 1

    torch.manual_seed(0)
    forced = save_model(tmp_path / "forced", Simulator(4, encoder="small", embed_dim=16, hidden=16),
                        {**TRAIN, "event_sampling": "forced"}, INFO,
                        extra={"family": "time-dependent", "class_names": CLASSES, "length": L,
                               "image_shape": [3, 16, 16]})
    code, out, err = run(capsys, "--model", forced, *images)
    assert code == 0 and "warning:" not in out + err
