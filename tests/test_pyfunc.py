"""A logged final model as MLflow's python_function: mlflow.pyfunc.load_model predicts what
focus_tune.predict computes for the same images and settings, and `mlflow models serve`
answers /invocations with the same numbers (a real server)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import mlflow
import numpy as np
import pytest

from focus_tune import predict
from focus_tune.data import load_dataset
from focus_tune.pyfunc import SimulatorModel
from test_tracking import _saved_model, dataset, manifest, tracker  # noqa: F401  (fixtures: dataset, manifest, tracker)


@pytest.fixture
def logged(tracker, manifest, dataset, tmp_path):  # noqa: F811
    model_id = tracker.log_model(_saved_model(tmp_path, manifest), "model-time-dependent")
    images = load_dataset(dataset).test.images[:3]  # uint8, as datasets and image files hold pixels
    return f"models:/{model_id}", images


def _reference(uri: str, tracker_uri: str, images: np.ndarray, num_samples: int, seed: int) -> list[dict]:
    loaded = predict.load(uri, tracking_uri=tracker_uri)
    return [predict.predict_one(loaded, predict.Item(f"image {i}", img.astype(np.uint8)), num_samples, seed,
                                loaded.alpha, estimator="rao_blackwell") for i, img in enumerate(images)]


def test_pyfunc_load_model_predicts_what_predict_computes(logged, tracker, manifest):  # noqa: F811
    uri, images = logged
    mlflow.set_tracking_uri(tracker.uri)
    model = mlflow.pyfunc.load_model(uri)
    assert "python_function" in mlflow.models.get_model_info(uri).flavors
    out = model.predict({"images": images}, params={"num_samples": 20, "seed": 3})
    ref = _reference(uri, tracker.uri, images, 20, 3)
    assert out["marginals"].shape == (3, manifest.length, manifest.num_classes)
    np.testing.assert_allclose(out["marginals"], np.asarray([r["marginals"] for r in ref]), atol=1e-6)
    for key in ("lower", "upper", "median", "mean"):
        np.testing.assert_allclose(out[key], [r["time_to_event"][key] for r in ref])
    assert out["class_names"] == list(manifest.class_names) and out["alpha"] == pytest.approx(0.9)
    # an image's draws do not depend on its place in the batch
    one = model.predict({"images": images[1:2]}, params={"num_samples": 20, "seed": 3})
    np.testing.assert_allclose(one["marginals"][0], out["marginals"][1])
    # the defaults are the CLI's (M = 100, seed 0, Rao-Blackwellized)
    default = model.predict({"images": images[:1]})
    expected = _reference(uri, tracker.uri, images[:1], 100, 0)[0]["marginals"]
    np.testing.assert_allclose(default["marginals"][0], expected, atol=1e-6)


def test_pyfunc_rejects_images_of_another_shape(logged, tracker):  # noqa: F811
    uri, images = logged
    model = SimulatorModel(predict.load(uri, tracking_uri=tracker.uri))
    with pytest.raises(predict.PredictError, match=r"images \(2, 3, 5, 5\): expected \[n, "):
        model.predict({"images": np.zeros((2, 3, 5, 5), np.uint8)})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_mlflow_models_serve_answers_with_the_same_numbers(logged, tracker, tmp_path):  # noqa: F811
    uri, images = logged
    port = _free_port()
    # MLflow starts the scoring server as `uvicorn` from PATH: this interpreter's scripts
    # first, so that the test does not depend on an activated virtualenv.
    env = dict(os.environ, MLFLOW_TRACKING_URI=tracker.uri,
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local",
                               "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    server.kill()
                    pytest.fail("the server did not start: " + (server.stdout.read() or "")[-3000:])
                time.sleep(1)
        body = json.dumps({"inputs": {"images": images.tolist()}, "params": {"num_samples": 20, "seed": 3}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                     headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(req, timeout=120).read())["predictions"]
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    ref = _reference(uri, tracker.uri, images, 20, 3)
    np.testing.assert_allclose(np.asarray(answer["marginals"]), np.asarray([r["marginals"] for r in ref]), atol=1e-6)
    np.testing.assert_allclose(answer["upper"], [r["time_to_event"]["upper"] for r in ref])
    assert answer["event"] == ref[0]["event"]


def test_register_makes_a_version_per_family_with_its_alias(tracker, manifest, tmp_path):  # noqa: F811
    ids = {family: tracker.log_model(_saved_model(tmp_path / family, manifest), f"model-{family}")
           for family in ("none", "time-dependent")}
    versions = {family: tracker.register_model(model_id, "focus-facemed", family) for family, model_id in ids.items()}
    assert versions == {"none": 1, "time-dependent": 2}
    client = tracker.client
    version = client.get_model_version_by_alias("focus-facemed", "time-dependent")
    assert version.source == f"models:/{ids['time-dependent']}"
    mlflow.set_tracking_uri(tracker.uri)
    model = mlflow.pyfunc.load_model("models:/focus-facemed@time-dependent")
    c, h, w = manifest.image_shape
    assert model.predict({"images": np.full((1, c, h, w), 128, np.uint8)},
                         params={"num_samples": 4})["marginals"].shape[0] == 1
    # a second search registers again: new versions, the aliases move
    assert tracker.register_model(ids["none"], "focus-facemed", "none") == 3
    assert int(client.get_model_version_by_alias("focus-facemed", "none").version) == 3


@pytest.mark.parametrize("name", ["", "a/b", "x:y", "m@alias"])
def test_register_names_that_would_break_a_models_uri_are_refused(name, capsys):
    from focus_tune.search.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--game", "hero", "--register", name])
    assert "registered model name" in capsys.readouterr().err
