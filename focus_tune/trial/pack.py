"""A pack's trainings as one program (``focus_tune.sim.packed``), each member trained, validated,
checkpointed and tested as :func:`~focus_tune.trial.training.train_trial` would do it alone (on
a CPU bit for bit, on a GPU up to rounding)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from ..procedure.job import PackJob
from ..scoring.evaluation import Scoring, evaluation_generator
from ..scoring.packed_eval import evaluate_packed
from ..sim.packed import (
    Member,
    PackedSimulator,
    PackTrainer,
    load_member,
    load_member_optimizer,
    member_model,
    member_optimizer_state,
    new_pack,
)
from ..sim.train import LearningRate, seed_everything
from .on_device import TrialSplits
from .training import Epoch, new_model, validation_step


@dataclass
class PackEpoch:
    """What a pack yields after an epoch: each member's :class:`~focus_tune.trial.training.Epoch`
    that has one this time (trial id -> epoch, in the pack's order)."""

    epoch: int
    members: dict[str, Epoch]

    @property
    def results(self) -> dict[str, dict]:
        """Trial id -> that member's result."""
        return {tid: member.result for tid, member in self.members.items()}

    @property
    def saves(self) -> bool:
        """Whether the pack checkpoints after this epoch (every member still training does)."""
        return any(member.saves for member in self.members.values())


def train_pack(pack: PackJob, splits: TrialSplits, device: torch.device,
               resume: dict[str, dict] | None = None) -> Iterator[PackEpoch]:
    """Every member's training, as one program: yields each epoch's :class:`PackEpoch`.

    ``resume``: the pack's last checkpoint, trial id -> that member's state (a retry continues
    every member from it); a member without one there had failed before it. A member whose
    loss turns non-finite yields ``failed`` once and stops; the others go on. A pack
    validates with the counted estimator and is not raced.
    """
    jobs, train, info = pack.jobs, pack.train, pack.jobs[0].data
    models, generators = [], []
    for job in jobs:  # each member's initial weights and batch order as alone
        generators.append(seed_everything(job.spec.seed))
        models.append(new_model(train, info, device))
    template = models[0]
    packed, optimizer = new_pack(models, train.lr, device, capturable=device.type == "cuda")
    members = [Member(job.spec.schedule.tensor(), g) for job, g in zip(jobs, generators)]
    validation = Scoring.of(train, "val")
    if validation.estimator != "counted":
        raise ValueError(f"a pack validates with the counted estimator; estimator {validation.estimator!r}: "
                         "use --pack 1")
    start = 0
    if resume is not None:  # a retry: every member from the pack's last checkpoint
        for k, job in enumerate(jobs):
            state = resume.get(job.trial_id)
            if state is None:  # failed (and reported) before that checkpoint
                members[k].failed = "its loss became non-finite before the pack's last checkpoint"
                continue
            load_member(packed, k, state["model"])
            load_member_optimizer(optimizer, packed, k, state["optimizer"])
            members[k].generator.set_state(state["generator"])
            start = state["epoch"]
    reported = {job.trial_id for job, m in zip(jobs, members) if m.failed}
    trainer = PackTrainer(packed, optimizer, [splits.train], members, train.batch_size,
                          autocast=device.type == "cuda" and train.precision == "bf16",
                          cuda_graph=device.type == "cuda",
                          lr=LearningRate.of(train.lr, train.lr_schedule, train.epochs, len(splits.train),
                                             train.batch_size))

    def evaluate(epoch: int, results: dict[str, dict]) -> PackEpoch:
        """Every member still training validated at once, then each one's step as alone."""
        t0 = time.perf_counter()
        alive = [k for k, m in enumerate(members) if m.failed is None]
        group = packed if len(alive) == packed.size else PackedSimulator([member_model(packed, k, template)
                                                                          for k in alive])
        vals = evaluate_packed(group, [splits.val] * len(alive), validation.num_samples, info.event,
                               [evaluation_generator(jobs[k].spec.seed, epoch) for k in alive], validation.ece_bins,
                               validation.alpha, validation.event_sampling, per_entry=True,
                               threads=max(1, pack.threads))
        eval_s = (time.perf_counter() - t0) / max(1, len(alive))
        out = {tid: Epoch(result) for tid, result in results.items()}
        for k, val in zip(alive, vals):
            job = jobs[k]
            out[job.trial_id] = validation_step(results[job.trial_id], val, eval_s, epoch, job, splits,
                                                member_model(packed, k, template),
                                                member_optimizer_state(optimizer, packed, k), members[k].generator,
                                                race_at=None)  # packs are not raced
        return PackEpoch(epoch, out)

    if start >= train.epochs:  # its last checkpoint saved, its results not recorded: evaluate again
        yield evaluate(train.epochs, {job.trial_id: {"epoch": train.epochs} for job, m in zip(jobs, members)
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
            if "failed" in out:  # as a solo trial's NonFiniteLoss: yielded once, marked failed
                results[job.trial_id] = {"epoch": epoch, "failed": 1, "error": out["failed"]}
                reported.add(job.trial_id)
            else:
                results[job.trial_id] = {**out, "time/train_s": train_s, "epoch": epoch}
        if len(reported) == len(jobs):
            yield PackEpoch(epoch, {tid: Epoch(result) for tid, result in results.items()})
            return
        if epoch % train.eval_every == 0 or epoch == train.epochs:
            yield evaluate(epoch, results)
        else:
            yield PackEpoch(epoch, {tid: Epoch(result) for tid, result in results.items()})
