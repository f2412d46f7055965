"""The Ray Tune function trainable: it only wires training, evaluation, reports and checkpoints.

A trial trains the simulator with its lambda schedule and seed, evaluates the validation
marginal ECE by Monte Carlo every ``eval_every`` epochs, and reports every epoch. It
checkpoints at every evaluation and resumes from ``tune.get_checkpoint()`` (a retry after
a crash) or from ``job.resume_from`` (a search resumed by the driver). A final trial also
evaluates on the test set and writes the per-entry arrays of that evaluation to a file in
its checkpoint; a final with ``source_checkpoint`` only evaluates that already-trained model.
A pack (:class:`~focus_tune.procedure.job.PackJob`) runs its members' trainings as one program and
validates, checkpoints and reports each as a solo trial would (:func:`_validated`, the one
step of both).

The trial's config holds one :class:`~focus_tune.procedure.job.TrialJob` under ``"job"``. The process
that runs it is where the Adam patch of :mod:`focus_tune.sim.adam_patch` is applied.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from functools import cached_property

import numpy as np
import ray
import torch
from ray import tune

from ..config.space import TrainConfig
from ..data import evaluation_groups
from ..durable import disk_full
from ..errors import NonFiniteLoss
from ..names import CONFORMAL_PREFIX, SELECT_KEYS, TS_CONFORMAL_PREFIX, TS_PREFIX
from ..procedure.job import (
    CONFIG_KEY, DISK_FULL_KEY, INFLUENCE_KEY, PER_ENTRY_FILE, PackJob, Splits, TrialJob, encode_influence, pack_result)
from ..scoring import conformal
from ..scoring.evaluation import Scoring, censoring_weights, conformal_scores, evaluation_generator, test_result
from ..scoring.metrics import item_influence, sequence_ece
from ..scoring.montecarlo import Estimates
from ..scoring.temperature import GRID, TemperatureFit, choose_on_grid, live_mask, paired_bootstrap_se
from ..sim.adam_patch import eager_optimizers
from ..sim.device_split import DeviceSplit
from ..sim.model_io import DataInfo
from ..sim.model_io import build_model
from ..sim.train import LearningRate, seed_everything, train_one_epoch

CHECKPOINT_FILE = "checkpoint.pt"


def save_checkpoint(directory: str, model, optimizer, epoch: int, generator: torch.Generator,
                    metrics: dict, with_optimizer: bool = True) -> None:
    """The one checkpoint schema: model, optimizer (omitted when training is over), epoch, RNG, metrics.

    ``optimizer``: the optimizer, or its ``state_dict`` already taken (a pack member's part of
    the pack's Adam, ``packed.member_optimizer_state``)."""
    opt_state = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
    state = {
        "model": model.state_dict(),
        "optimizer": opt_state if with_optimizer else None,
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


class TrialSplits:
    """A trial's splits on its device (:class:`~focus_tune.sim.device_split.DeviceSplit`), each moved
    there once, when first needed: the training split, the validation's first ``val_items``,
    the test's first ``test_items`` (finals only). A pack's members share one."""

    def __init__(self, data: Splits, train: TrainConfig, info: DataInfo, device: torch.device):
        self._data, self._train, self._info, self._device = data, train, info, device

    @cached_property
    def train(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.train, self._device)

    @cached_property
    def val(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.val, self._device, items=self._train.val_items)

    @cached_property
    def test(self) -> DeviceSplit:
        return DeviceSplit.from_arrays(self._data.test, self._device, items=self._train.test_items)

    @cached_property
    def test_groups(self) -> dict[str, np.ndarray]:
        """The test items' groups (FaceMed's age bands: ``interval/coverage_<group>``)."""
        return evaluation_groups({k: v[:len(self.test)] for k, v in self._data.test.extras.items()},
                                 self._info.scenario)


def run_trial(config: dict, data: Splits, on_epoch=None) -> None:
    """Ray Tune entry point (wrap with ``tune.with_parameters(run_trial, data=...)``).

    ``config["job"]`` is the :class:`~focus_tune.procedure.job.TrialJob`; ``data`` the
    :class:`~focus_tune.procedure.job.Splits` (numpy arrays). ``on_epoch(job, epoch, model,
    resumed)``, called before each training epoch, is a seam for tests (fault injection);
    the search passes none.

    A full disk (ENOSPC, EDQUOT: persisting a checkpoint to the storage, or its temporary
    copy) ends the trial with a result holding only ``DISK_FULL_KEY``: retries would meet the
    same full disk, and the driver stops the search on it rather than score the trial as failed.
    """
    eager_optimizers()  # a trial's process: its Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    try:
        if isinstance(config[CONFIG_KEY], PackJob):
            _run_pack(config[CONFIG_KEY], data)
        else:
            _run_trial(config, data, on_epoch)
    except OSError as err:
        if disk_full(err) is None:
            raise
        tune.report({DISK_FULL_KEY: f"{type(err).__name__}: {err}"})  # no checkpoint: nothing to write


def _run_trial(config: dict, data: Splits, on_epoch=None) -> None:
    job: TrialJob = config[CONFIG_KEY]
    torch.set_num_threads(max(1, job.threads))
    train, info = job.train, job.data
    device = _device()
    generator = seed_everything(job.spec.seed)
    model = build_model(train, info).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # with channels_last inputs (model.encode)
    optimizer = torch.optim.Adam(model.parameters(), lr=train.lr)  # no weight decay, as in the paper
    lambdas = job.spec.schedule.tensor()
    splits = TrialSplits(data, train, info, device)

    if job.source_checkpoint:
        # A final that reuses the search trial trained with the same schedule and seed. Its
        # training and validation metrics are that trial's (MLflow copies them into this run);
        # it reports the test metrics only.
        state = load_checkpoint(tune.Checkpoint(job.source_checkpoint))
        model.load_state_dict(state["model"])
        result = {"epoch": state["epoch"], "score": float(state["metrics"][f"val/{SELECT_KEYS[train.select_by]}"])}
        with tempfile.TemporaryDirectory() as d:
            result.update(_test_metrics(model, splits, job, d))
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))
        return

    start, resumed = 0, False
    checkpoint = tune.get_checkpoint()
    if checkpoint is None and job.resume_from:
        checkpoint = tune.Checkpoint(job.resume_from)
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        model.load_state_dict(state["model"])
        if state["optimizer"] is not None:
            optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        start, resumed = state["epoch"], True

    validation = Scoring.of(train, "val")
    lr = LearningRate.of(train.lr, train.lr_schedule, train.epochs, len(splits.train), train.batch_size)
    batches = math.ceil(len(splits.train) / train.batch_size)
    # A search trial of a racing search validates at the race epoch too (focus_tune.procedure.racing).
    race_at = train.race_at if train.racing != "off" and not job.evaluate_test else None

    def evaluate_and_report(epoch: int, result: dict) -> None:
        """Validate (deterministic: a fresh generator per epoch), checkpoint and report."""
        t0 = time.perf_counter()
        val = validation.evaluate(model, splits.val, info.event, evaluation_generator(job.spec.seed, epoch),
                                  per_entry=True)
        with tempfile.TemporaryDirectory() as d:
            _validated(d, result, val, time.perf_counter() - t0, epoch, job, splits, model, optimizer, generator,
                       race_at)
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))

    if start >= train.epochs:
        # Its last checkpoint was saved but its result never recorded (the driver stopped in
        # between): the same final evaluation again, which gives the same numbers, instead of
        # a trial that reports nothing and would be handed out again and again.
        evaluate_and_report(train.epochs, {"epoch": train.epochs, "node_id": ray.get_runtime_context().get_node_id()})
        return
    for epoch in range(start + 1, train.epochs + 1):
        if on_epoch is not None:
            on_epoch(job, epoch, model, resumed)
        t0 = time.perf_counter()
        try:
            result = train_one_epoch(model, optimizer, splits.train, lambdas, train.batch_size, generator,
                                     autocast=device.type == "cuda" and train.precision == "bf16",
                                     lr=lr, step=(epoch - 1) * batches)
        except NonFiniteLoss as err:
            # Retrying would meet the same NaN: end the trial, marked failed, with the reason.
            tune.report({"epoch": epoch, "failed": 1, "error": str(err)})
            return
        result["time/train_s"] = time.perf_counter() - t0
        result["epoch"] = epoch
        result["node_id"] = ray.get_runtime_context().get_node_id()  # where it ran (multi-node checks)
        if epoch % train.eval_every == 0 or epoch == train.epochs or epoch == race_at:
            evaluate_and_report(epoch, result)
        else:
            tune.report(result)


def _run_pack(pack: PackJob, data: Splits) -> None:
    """A pack's trainings as one program (``focus_tune.sim.packed``): every member trains, is
    validated, checkpointed and tested exactly as :func:`_run_trial` would do it alone (on a
    CPU bit for bit, on a GPU up to rounding). Each report holds the members' results under
    ``"members"``; a checkpoint holds one folder per member, named after it, in the solo
    schema (a resumed search continues a member alone from it). A member whose loss turns
    non-finite reports ``failed`` once and stops; the others go on. A retry after a crash
    continues every member from the pack's last checkpoint.
    """
    from ..sim.packed import (
        Member, PackTrainer, PackedSimulator, load_member, load_member_optimizer, member_model, member_optimizer_state,
        new_pack)
    from ..scoring.packed_eval import evaluate_packed

    jobs, train, info = pack.jobs, pack.train, pack.jobs[0].data
    torch.set_num_threads(max(1, pack.threads))
    device = _device()
    models, generators = [], []
    for job in jobs:  # each member's initial weights and batch order as alone
        generators.append(seed_everything(job.spec.seed))
        model = build_model(train, info).to(device)
        models.append(model.to(memory_format=torch.channels_last) if device.type == "cuda" else model)
    template = models[0]
    packed, optimizer = new_pack(models, train.lr, device, capturable=device.type == "cuda")
    members = [Member(job.spec.schedule.tensor(), g) for job, g in zip(jobs, generators)]
    validation = Scoring.of(train, "val")
    if validation.estimator != "counted":
        raise ValueError(f"a pack validates with the counted estimator; estimator {validation.estimator!r}: "
                         "use --pack 1")
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # a retry: every member from the pack's last checkpoint
        with checkpoint.as_directory() as d:
            for k, job in enumerate(jobs):
                path = os.path.join(d, job.trial_id)
                if not os.path.isdir(path):  # failed (and reported) before that checkpoint
                    members[k].failed = "its loss became non-finite before the pack's last checkpoint"
                    continue
                state = load_checkpoint(tune.Checkpoint(path))
                load_member(packed, k, state["model"])
                load_member_optimizer(optimizer, packed, k, state["optimizer"])
                members[k].generator.set_state(state["generator"])
                start = state["epoch"]
    reported = {job.trial_id for job, m in zip(jobs, members) if m.failed}
    splits = TrialSplits(data, train, info, device)
    trainer = PackTrainer(packed, optimizer, [splits.train], members, train.batch_size,
                          autocast=device.type == "cuda" and train.precision == "bf16", cuda_graph=device.type == "cuda",
                          lr=LearningRate.of(train.lr, train.lr_schedule, train.epochs, len(splits.train),
                                             train.batch_size))
    node = ray.get_runtime_context().get_node_id()

    def evaluate_and_report(epoch: int, results: dict) -> None:
        t0 = time.perf_counter()
        alive = [k for k, m in enumerate(members) if m.failed is None]
        group = packed if len(alive) == packed.size else PackedSimulator([member_model(packed, k, template)
                                                                          for k in alive])
        vals = evaluate_packed(group, [splits.val] * len(alive), validation.num_samples, info.event,
                               [evaluation_generator(jobs[k].spec.seed, epoch) for k in alive], validation.ece_bins,
                               validation.alpha, validation.event_sampling, per_entry=True,
                               threads=max(1, pack.threads))
        eval_s = (time.perf_counter() - t0) / max(1, len(alive))
        with tempfile.TemporaryDirectory() as d:
            for k, val in zip(alive, vals):
                job = jobs[k]
                folder = os.path.join(d, job.trial_id)
                os.makedirs(folder)
                _validated(folder, results[job.trial_id], val, eval_s, epoch, job, splits,
                           member_model(packed, k, template), member_optimizer_state(optimizer, packed, k),
                           members[k].generator, race_at=None)  # packs are not raced
            tune.report(pack_result(results, epoch=epoch, node_id=node), checkpoint=tune.Checkpoint.from_directory(d))

    if start >= train.epochs:  # its last checkpoint saved, its results not recorded: evaluate again
        evaluate_and_report(train.epochs, {job.trial_id: {"epoch": train.epochs} for job, m in zip(jobs, members)
                                           if m.failed is None})
        return
    for epoch in range(start + 1, train.epochs + 1):
        t0 = time.perf_counter()
        outs = trainer.epoch(epoch)
        train_s = time.perf_counter() - t0
        results = {}
        for job, out in zip(jobs, outs):
            if job.trial_id in reported:
                continue
            if "failed" in out:  # as a solo trial's NonFiniteLoss: reported once, marked failed
                results[job.trial_id] = {"epoch": epoch, "failed": 1, "error": out["failed"]}
                reported.add(job.trial_id)
            else:
                results[job.trial_id] = {**out, "time/train_s": train_s, "epoch": epoch}
        if len(reported) == len(jobs):
            tune.report(pack_result(results, epoch=epoch, node_id=node))
            return
        if epoch % train.eval_every == 0 or epoch == train.epochs:
            evaluate_and_report(epoch, results)
        else:
            tune.report(pack_result(results, epoch=epoch, node_id=node))


def _validated(folder: str, result: dict, val: dict, eval_s: float, epoch: int, job: TrialJob, splits: TrialSplits,
               model, optimizer, generator: torch.Generator, race_at: int | None) -> None:
    """One training's validation after ``epoch`` into its result and its checkpoint in ``folder``:
    the solo trial's step and each pack member's.

    ``val``: the validation's :func:`~focus_tune.scoring.evaluation.evaluate` result (with its per-entry
    arrays and probabilities). ``result`` gains the ``val/`` metrics, the score and, where a
    stage decides by this evaluation (the last epoch's, the race epoch's; finals decide
    nothing), the validation items' influences; the checkpoint keeps the optimizer until the
    last epoch, and a final's last epoch adds its test metrics (:func:`_test_metrics`).
    """
    train = job.train
    val.pop("per_entry")
    val.pop("time_pmf", None)
    probs = val.pop("probs")
    last_val = {f"val/{k.removeprefix('marginal/')}": v for k, v in val.items() if k.startswith("marginal/")}
    result.update(last_val)
    result["score"] = float(last_val[f"val/{SELECT_KEYS[train.select_by]}"])
    final = epoch == train.epochs
    if (final or epoch == race_at) and not job.evaluate_test:
        result[INFLUENCE_KEY] = encode_influence(item_influence(
            probs, splits.val.sequences.cpu().numpy(), train.select_by, train.ece_bins,
            weights=split_weights(splits.val)))
    result["time/eval_s"] = eval_s
    save_checkpoint(folder, model, optimizer, epoch, generator, last_val, with_optimizer=not final)
    if final and job.evaluate_test:
        result.update(_test_metrics(model, splits, job, folder))


def _test_metrics(model, splits: TrialSplits, job: TrialJob, folder: str) -> dict:
    """The final's test metrics; a 'none' final adds its temperature-scaled baseline. The
    per-entry arrays (for the report's figures) go to ``folder/test_per_entry.json``.

    Temperature scaling: one temperature chosen on the validation split (see
    :func:`_fit_temperature`), then the same evaluation of the test set with the tempered
    model and the unscaled evaluation's uniforms (with T = 1, that evaluation itself), reported under ``temperature-scaled/test/...`` with ``temperature_pooled`` (the
    value used), ``temperature_at_bound`` (entries whose temperature is at the edge of the
    grid, where the optimum may lie beyond it), ``temperature_margin`` and ``_margin_se`` (the
    validation margin over T = 1 and its noise) and the grid's validation ECEs in the
    per-entry file.
    """
    train, seed = job.train, job.spec.seed
    t0 = time.perf_counter()
    test, scoring = splits.test, Scoring.of(train)
    labels = test.sequences.cpu().numpy()

    def evaluated(temperature: torch.Tensor | None = None) -> dict:  # the unscaled evaluation's uniforms
        return scoring.evaluate(model, test, job.data.event, evaluation_generator(seed, -1),
                                condition_class=job.data.condition_class, per_entry=True, temperature=temperature,
                                groups=splits.test_groups)

    out = evaluated()
    per_entry, probs, pmf = out.pop("per_entry"), out.pop("probs"), out.pop("time_pmf")
    weights = split_weights(test)
    result = test_result(out, per_entry, probs, labels, train.ece_bins, weights=weights)
    files = {"test_per_entry": result.pop("test_per_entry")}
    t1 = time.perf_counter()
    level = _conformal_level(model, splits, job)
    result.update(_conformal_row(CONFORMAL_PREFIX, level, per_entry, probs, pmf, splits, train.alpha))
    result["time/conformal_s"] = time.perf_counter() - t1
    if job.spec.family == "none":
        t1 = time.perf_counter()
        fit = _fit_temperature(model, splits, job)
        result["time/temperature_s"] = time.perf_counter() - t1
        if fit.pooled == 1.0:  # no change: the same draws (below) would give the same numbers
            ts, ts_entry, ts_probs, ts_pmf, ts_level = dict(out), dict(per_entry), probs, pmf, level
        else:  # the rows differ by the temperature alone
            temperature = torch.as_tensor(fit.temperature)
            ts = evaluated(temperature)
            ts_entry, ts_probs, ts_pmf = ts.pop("per_entry"), ts.pop("probs"), ts.pop("time_pmf")
            ts_level = _conformal_level(model, splits, job, temperature)
        result.update(_conformal_row(TS_CONFORMAL_PREFIX, ts_level, ts_entry, ts_probs, ts_pmf, splits, train.alpha))
        ts_entry["temperature"] = fit.temperature
        ts_entry["temperature_grid"] = {"T": list(fit.scores), "val_ece": list(fit.scores.values())}
        ts.update(fit.summary())  # temperature_pooled, _at_bound, _mean, _min, _max, _margin, _margin_se
        scaled = test_result(ts, ts_entry, ts_probs, labels, train.ece_bins, weights=weights)
        files[TS_PREFIX + "per_entry"] = scaled.pop("test_per_entry")
        result.update({TS_PREFIX + k.removeprefix("test/"): v for k, v in scaled.items()})
    with open(os.path.join(folder, PER_ENTRY_FILE), "w") as handle:
        json.dump(files, handle)
    result["time/test_s"] = time.perf_counter() - t0  # the test evaluations, the temperature's fit included
    return result


def _conformal_level(model, splits: TrialSplits, job: TrialJob,
                     temperature: torch.Tensor | None = None) -> tuple[float, float]:
    """The split conformal level of I_alpha and the validation items behind it
    (:func:`focus_tune.scoring.conformal.calibrate`): the validation split scored as the test is (the
    test's estimator and M, at ``temperature``), so that its scores and the test's are
    exchangeable; one fresh generator, the same uniforms at every temperature."""
    val = splits.val
    out = Scoring.of(job.train).evaluate(model, val, job.data.event, evaluation_generator(job.spec.seed, -4),
                                         per_entry=True, temperature=temperature)
    return conformal.calibrate(out["time_pmf"], val.time_to_event.cpu().numpy(), job.train.alpha, val.censored)


def _conformal_row(prefix: str, level: tuple[float, float], per_entry: dict, probs, pmf, splits: TrialSplits,
                   alpha: float) -> dict:
    """The ``+conformal`` row of a test evaluation (its point and pmf, the conformal interval at
    ``level``), keyed ``<prefix><group>/<metric>``."""
    interval = per_entry["interval"]
    est = Estimates(probs, interval["lo"], interval["hi"], interval["point"], time_pmf=pmf)
    row = conformal_scores(est, interval["true"], *level, alpha=alpha, groups=splits.test_groups,
                           censored=splits.test.censored)
    return {prefix + k: v for k, v in row.items()}


def split_weights(data: DeviceSplit) -> np.ndarray | None:
    """The entry-level censoring weights of a right-censored split
    (:func:`~focus_tune.scoring.evaluation.censoring_weights`, what its scores use), None when every
    entry is observed."""
    if data.observed is None:
        return None
    return censoring_weights(data.sequences.cpu().numpy(), data.time_to_event.cpu().numpy(), data.observed_numpy,
                             data.censored)


def _fit_temperature(model, splits: TrialSplits, job: TrialJob) -> TemperatureFit:
    """The temperature-scaled baseline's temperature: one T on :data:`~focus_tune.scoring.temperature.GRID`
    with the lowest validation sampled marginal ECE, the criterion the search picks lambda by,
    kept only if it beats T = 1 by more than twice the standard error of the difference (a
    paired bootstrap over the validation items).

    Not a teacher-forced NLL fit: on the quick H.E.R.O. model the NLL fit per entry on all
    rows put 61 of 100 temperatures at 0.05 (no live validation row after entry 41) and froze
    the late samples, and the NLL fits on live rows only (one T, or one per entry) still
    sampled a worse test ECE than T = 1 (docs/results/temperature/README.md). Without the
    noise guard the grid chose T = 0.9 on two of three quick H.E.R.O. seeds by validation
    margins of 0.0006-0.0015 and made test entries 41-100 worse (ECE 0.0094 -> 0.0250 and
    0.0066 -> 0.0199). The validation items are the search's (``val_items``); every candidate
    draws the same uniforms (one fresh generator each), so their differences are the
    temperature's, not Monte Carlo noise.
    """
    train, info = job.train, job.data
    val, validation = splits.val, Scoring.of(train, "val")
    labels = val.sequences.cpu().numpy()
    observed = val.observed_numpy  # right-censored data: every score over the observed labels, weighted
    weights = split_weights(val)
    L = labels.shape[1]
    probs = {}

    def val_ece(t: float) -> float:
        out = validation.evaluate(model, val, info.event, evaluation_generator(job.spec.seed, -3),
                                  temperature=torch.full((L,), t), per_entry=True)
        probs[t] = out["probs"]
        return out["marginal/ece"]

    def on_items(t: float, idx: np.ndarray) -> float:
        return sequence_ece(probs[t][idx], labels[idx], train.ece_bins, weights=None if weights is None else weights[idx])

    def margin_se(best: float, one: float) -> float:
        return paired_bootstrap_se(on_items, one, best, len(labels), seed=job.spec.seed)

    return choose_on_grid(val_ece, GRID, L, live_mask(labels, info.event, observed).sum(0), margin_se=margin_se)
