"""The Ray Tune function trainable: it only wires training, evaluation, reports and checkpoints.

A trial trains the simulator with its lambda schedule and seed, evaluates the validation
marginal ECE by Monte Carlo every ``eval_every`` epochs, and reports every epoch. It
checkpoints at every evaluation and resumes from ``tune.get_checkpoint()`` (a retry after
a crash) or from ``resume_from`` (a search resumed by the driver). A final trial also
evaluates on the test set; a final with ``source_checkpoint`` only evaluates that
already-trained model.

Config keys (made by :func:`trial_config`): ``trial`` (the TrialSpec as a dict), ``train``
(TrainConfig as a dict), ``data`` (num_classes, event, condition_class, in_channels),
``evaluate_test``, ``source_checkpoint``, ``resume_from``, ``threads``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import ray
import torch
from ray import tune

from .baselines import TS_PREFIX, fit_temperatures
from .model import Simulator
from .train import (NonFiniteLoss, Split, evaluate, seed_everything, teacher_forced_logits, test_result,
                    train_one_epoch)

CHECKPOINT_FILE = "checkpoint.pt"
FAULTS_ENV = "FOCUS_TUNE_TEST_FAULTS"  # test-only fault injection, see _maybe_inject_fault


def trial_config(spec, train: dict, data_info: dict, evaluate_test: bool,
                 source_checkpoint: str | None = None, resume_from: str | None = None, threads: int = 1) -> dict:
    """The Tune config of one trial: plain values only, so it logs and serializes cleanly."""
    return {
        "trial": {
            "trial_id": spec.trial_id, "stage": spec.stage, "family": spec.family,
            "schedule": list(spec.schedule.values), "summary": str(spec.schedule),
            "seed": spec.seed, "params": dict(spec.params), "source_trial": spec.source_trial,
        },
        "train": train,
        "data": data_info,
        "evaluate_test": evaluate_test,
        "source_checkpoint": source_checkpoint,
        "resume_from": resume_from,
        "threads": threads,
    }


def build_model(train: dict, data_info: dict) -> Simulator:
    return Simulator(
        data_info["num_classes"], encoder=train["encoder"], embed_dim=train["embed_dim"],
        hidden=train["hidden"], in_channels=data_info["in_channels"],
        encoder_width=train["encoder_width"],
    )


def save_checkpoint(directory: str, model, optimizer, epoch: int, generator: torch.Generator,
                    metrics: dict, with_optimizer: bool = True) -> None:
    """The one checkpoint schema: model, optimizer (omitted when training is over), epoch, RNG, metrics."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if with_optimizer else None,
        "epoch": epoch,
        "generator": generator.get_state(),
        "metrics": metrics,
    }
    tmp = os.path.join(directory, CHECKPOINT_FILE + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, os.path.join(directory, CHECKPOINT_FILE))  # atomic


def load_checkpoint(checkpoint: tune.Checkpoint) -> dict:
    with checkpoint.as_directory() as d:
        return torch.load(os.path.join(d, CHECKPOINT_FILE), map_location="cpu", weights_only=True)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() and tune.get_context().get_trial_resources()
                        .required_resources.get("GPU", 0) > 0 else "cpu")


def _maybe_inject_fault(trial_id: str, epoch: int, resumed: bool) -> None:
    """Test-only: FOCUS_TUNE_TEST_FAULTS='{"<trial_id>": "raise@<epoch>"}' makes that trial
    raise once at that epoch (not after a resume), to exercise retries from checkpoints."""
    spec = json.loads(os.environ.get(FAULTS_ENV, "{}")).get(trial_id)
    if spec and spec == f"raise@{epoch}" and not resumed:
        raise RuntimeError(f"injected fault in {trial_id} at epoch {epoch}")


def _nan_fault(trial_id: str) -> bool:
    return json.loads(os.environ.get(FAULTS_ENV, "{}")).get(trial_id) == "nan"


def run_trial(config: dict, data: dict) -> None:
    """Ray Tune entry point (wrap with ``tune.with_parameters(run_trial, data=...)``).

    ``config["trial_config"]`` is made by :func:`trial_config`; ``data`` holds the splits
    as numpy arrays: {"train": {...}, "val": {...}, "test": {...}}.
    """
    config = config["trial_config"]
    torch.set_num_threads(max(1, int(config["threads"])))
    trial, train, info = config["trial"], config["train"], config["data"]
    device = _device()
    generator = seed_everything(trial["seed"])
    model = build_model(train, info).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # with channels_last inputs (model.encode)
    optimizer = torch.optim.Adam(model.parameters(), lr=train["lr"])  # no weight decay, as in the paper
    lambdas = torch.tensor(trial["schedule"], dtype=torch.float32)
    common = dict(event=info["event"], n_bins=train["ece_bins"], alpha=train["alpha"], absorbing=train["absorbing"])

    if config["source_checkpoint"]:
        # A final that reuses the search trial trained with the same schedule and seed.
        state = load_checkpoint(tune.Checkpoint(config["source_checkpoint"]))
        model.load_state_dict(state["model"])
        _report_test(model, data, train, info, common, trial, epoch=state["epoch"],
                     val=state["metrics"], device=device)
        return

    start, resumed, last_val = 0, False, {}
    checkpoint = tune.get_checkpoint()
    if checkpoint is None and config["resume_from"]:
        checkpoint = tune.Checkpoint(config["resume_from"])
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        model.load_state_dict(state["model"])
        if state["optimizer"] is not None:
            optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        start, resumed, last_val = state["epoch"], True, state["metrics"]
    if _nan_fault(trial["trial_id"]):
        with torch.no_grad():
            model.head.bias.fill_(float("nan"))

    train_split = Split.from_arrays(_ns(data["train"]), device)
    val_split = Split.from_arrays(_ns(data["val"]), device, items=train["val_items"])
    epochs, every = train["epochs"], train["eval_every"]
    for epoch in range(start + 1, epochs + 1):
        _maybe_inject_fault(trial["trial_id"], epoch, resumed)
        t0 = time.perf_counter()
        try:
            result = train_one_epoch(model, optimizer, train_split, lambdas, train["batch_size"], generator,
                                     autocast=device.type == "cuda" and train["precision"] == "bf16")
        except NonFiniteLoss as err:
            # Retrying would meet the same NaN: end the trial, marked failed, with the reason.
            tune.report({"epoch": epoch, "failed": 1, "error": str(err)})
            return
        result["time/train_s"] = time.perf_counter() - t0
        result["epoch"] = epoch
        result["node_id"] = ray.get_runtime_context().get_node_id()  # where it ran (multi-node checks)
        if epoch % every == 0 or epoch == epochs:
            t0 = time.perf_counter()
            # A fresh generator per evaluation: the estimate does not depend on a resume.
            val = evaluate(model, val_split, train["num_samples"], generator=_eval_gen(trial["seed"], epoch), **common)
            last_val = {f"val/{k.removeprefix('marginal/')}": v for k, v in val.items()
                        if k.startswith("marginal/")}
            result.update(last_val)
            result["time/eval_s"] = time.perf_counter() - t0
            final = epoch == epochs
            with tempfile.TemporaryDirectory() as d:
                save_checkpoint(d, model, optimizer, epoch, generator, last_val, with_optimizer=not final)
                if final and config["evaluate_test"]:
                    result.update(_test_metrics(model, data, train, info, common, trial, device))
                result["score"] = float(last_val["val/ece"])
                tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(result)


def _eval_gen(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 100_003 + epoch)


def _ns(split: dict):
    """A dict of arrays seen as an object with attributes (what Split.from_arrays reads)."""
    return type("SplitArrays", (), split)


def _test_metrics(model, data, train, info, common, trial, device) -> dict:
    """The final's test metrics; a 'none' final adds its temperature-scaled baseline.

    Temperature scaling: one temperature per entry fitted on the validation split (the same
    items as the validation ECE) by the teacher-forced NLL, then the same evaluation of the
    test set with the tempered model, reported under ``test/temperature-scaled/...``.
    """
    test = Split.from_arrays(_ns(data["test"]), device, items=train["test_items"])
    labels = test.sequences.cpu().numpy()
    cond = info["condition_class"]
    out = evaluate(model, test, train["num_samples"], generator=_eval_gen(trial["seed"], -1),
                   condition_class=cond, per_entry=True, **common)
    result = test_result(out, out.pop("per_entry"), out.pop("probs"), labels, train["ece_bins"])
    if trial["family"] == "none":
        val = Split.from_arrays(_ns(data["val"]), device, items=train["val_items"])
        temperature = fit_temperatures(teacher_forced_logits(model, val), val.sequences.cpu().numpy())
        ts = evaluate(model, test, train["num_samples"], generator=_eval_gen(trial["seed"], -2),
                      condition_class=cond, per_entry=True, temperature=torch.as_tensor(temperature), **common)
        per_entry = ts.pop("per_entry")
        per_entry["temperature"] = temperature
        ts["temperature_mean"] = float(temperature.mean())
        scaled = test_result(ts, per_entry, ts.pop("probs"), labels, train["ece_bins"])
        result.update({TS_PREFIX + k.removeprefix("test/"): v for k, v in scaled.items() if k != "test_per_entry"})
        result[TS_PREFIX + "per_entry"] = scaled["test_per_entry"]
    return result


def _report_test(model, data, train, info, common, trial, epoch, val, device) -> None:
    result = {"epoch": epoch, **val}
    result.update(_test_metrics(model, data, train, info, common, trial, device))
    result["score"] = float(val["val/ece"])
    tune.report(result)
