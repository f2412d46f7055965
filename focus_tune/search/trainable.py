"""The Ray Tune function trainable: a thin adapter over the trial layer (:mod:`focus_tune.trial`).

A trial's training, validation, checkpoint states and a final's test scoring are the trial
layer's (plain PyTorch, no Ray); this module picks the trial's device, finds the checkpoint
to continue from (``tune.get_checkpoint()``: a retry after a crash; ``job.resume_from``: a
search resumed by the driver; a final's ``source_checkpoint``: the search trial it only
evaluates), and reports each epoch the trial layer yields (``tune.report``), with its
checkpoint written to a temporary folder (``tune.Checkpoint``) where it has one. A pack
(:class:`~focus_tune.procedure.job.PackJob`) reports its members' results under ``"members"``
and checkpoints one folder per member, named after it, in the solo schema.

The trial's config holds one :class:`~focus_tune.procedure.job.TrialJob` under ``"job"``. The process
that runs it is where the Adam patch of :mod:`focus_tune.sim.adam_patch` is applied.
"""

from __future__ import annotations

import os
import tempfile

import ray
import torch
from ray import tune

from ..durable import disk_full
from ..procedure.job import CONFIG_KEY, DISK_FULL_KEY, PackJob, Splits, TrialJob, pack_result
from ..sim.adam_patch import eager_optimizers
from ..trial.checkpoint import read_checkpoint, write_checkpoint
from ..trial.on_device import TrialSplits
from ..trial.pack import train_pack
from ..trial.training import Epoch, score_trained, train_trial


def load_checkpoint(checkpoint: tune.Checkpoint) -> dict:
    """A trial's checkpoint state (:func:`~focus_tune.trial.checkpoint.read_checkpoint`), on the CPU."""
    with checkpoint.as_directory() as d:
        return read_checkpoint(d)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() and tune.get_context().get_trial_resources()
                        .required_resources.get("GPU", 0) > 0 else "cpu")


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
            _run_trial(config[CONFIG_KEY], data, on_epoch)
    except OSError as err:
        if disk_full(err) is None:
            raise
        tune.report({DISK_FULL_KEY: f"{type(err).__name__}: {err}"})  # no checkpoint: nothing to write


def _run_trial(job: TrialJob, data: Splits, on_epoch=None) -> None:
    torch.set_num_threads(max(1, job.threads))
    device = _device()
    splits = TrialSplits(data, job.train, job.data, device)
    if job.source_checkpoint:
        _report(score_trained(job, splits, device, load_checkpoint(tune.Checkpoint(job.source_checkpoint))))
        return
    checkpoint = tune.get_checkpoint()
    if checkpoint is None and job.resume_from:
        checkpoint = tune.Checkpoint(job.resume_from)
    resume = None if checkpoint is None else load_checkpoint(checkpoint)
    node = ray.get_runtime_context().get_node_id()  # where it ran (multi-node checks)
    for epoch in train_trial(job, splits, device, resume, on_epoch):
        _report(epoch, node_id=node)


def _report(epoch: Epoch, **shared) -> None:
    """One epoch's result (with ``shared`` keys), and its checkpoint where it has one."""
    result = {**epoch.result, **shared}
    if not epoch.saves:
        tune.report(result)
        return
    with tempfile.TemporaryDirectory() as d:
        write_checkpoint(d, epoch.state, epoch.per_entry)
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))


def _run_pack(pack: PackJob, data: Splits) -> None:
    """A pack (:func:`~focus_tune.trial.pack.train_pack`): a retry after a crash continues every
    member from the pack's last checkpoint, whose folders are the members that had not failed."""
    torch.set_num_threads(max(1, pack.threads))
    device = _device()
    resume = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            resume = {job.trial_id: read_checkpoint(os.path.join(d, job.trial_id)) for job in pack.jobs
                      if os.path.isdir(os.path.join(d, job.trial_id))}
    node = ray.get_runtime_context().get_node_id()
    for epoch in train_pack(pack, TrialSplits(data, pack.train, pack.jobs[0].data, device), device, resume):
        result = pack_result(epoch.results, epoch=epoch.epoch, node_id=node)
        if not epoch.saves:
            tune.report(result)
            continue
        with tempfile.TemporaryDirectory() as d:
            for trial_id, member in epoch.members.items():
                if member.saves:
                    folder = os.path.join(d, trial_id)
                    os.makedirs(folder)
                    write_checkpoint(folder, member.state, member.per_entry)
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(d))
