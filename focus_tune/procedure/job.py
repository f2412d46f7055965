"""What one trial runs: the one typed contract between the search driver and the trainable.

The driver makes a :class:`TrialJob` from the plan's :class:`~focus_tune.procedure.trials.TrialSpec`
and the validated config; Ray Tune carries it in the trial's config under ``"job"``; the
trainable, the MLflow callback and the progress display read its attributes. Nothing on
the way turns it into a dict.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from ..config.space import TrainConfig
from ..data.dataset_reader import Split
from ..sim.model_io import DataInfo
from .trials import TrialSpec

CONFIG_KEY = "job"  # the key of the TrialJob in a Tune trial's config
SUMMARY_KEY = "trial"  # beside it: the job as plain values, for Ray Tune's own logs (job_summary)
PER_ENTRY_FILE = "test_per_entry.json"  # a final's per-entry test arrays, in its reported checkpoint
# The result key of a validation's per-item influences on its score (metrics.item_influence):
# the float32 array, base64, so that a stage decision can weigh a difference by its noise.
INFLUENCE_KEY = "val/influence"
# A trial whose checkpoint could not be written for a full disk reports this (the error's text)
# and ends: the driver stops the search instead of scoring the trial as failed.
DISK_FULL_KEY = "disk_full"


def encode_influence(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def decode_influence(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float64)


@dataclass(frozen=True)
class Splits:
    """The dataset's three splits as every trial receives them (``focus_tune.data.dataset_reader.Split``:
    numpy arrays, decoded once by the driver and shared through Ray's object store)."""

    train: "Split"
    val: "Split"
    test: "Split"

    @classmethod
    def of(cls, dataset) -> "Splits":
        """From a loaded dataset (``focus_tune.data.load_dataset``): decodes every split file,
        so a corrupt one fails here, before anything runs."""
        return cls(dataset.train, dataset.val, dataset.test)


@dataclass(frozen=True)
class TrialJob:
    """One trial: train ``spec.schedule`` with ``spec.seed`` (or, for a final with
    ``source_checkpoint``, only evaluate that trained model on the test set).

    resume_from: the checkpoint a resumed search continues from (a retry after a crash
    uses Tune's own checkpoint instead); threads: torch threads of the trial; k1: the
    schedule's k1, the stages of a ``none`` final's time-dependent temperature (None: that
    row is not scored).
    """

    spec: TrialSpec
    train: TrainConfig
    data: DataInfo
    source_checkpoint: str | None = None
    resume_from: str | None = None
    threads: int = 1
    k1: int | None = None

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id

    @property
    def evaluate_test(self) -> bool:
        """Finals are evaluated on the test set; search trials only on validation."""
        return self.spec.stage == "final"

    @property
    def trains(self) -> bool:
        return self.source_checkpoint is None


@dataclass(frozen=True)
class PackJob:
    """Trainings run as one trial (``--pack K``): a pack of members trained as one program
    (``focus_tune.sim.packed``), each member a :class:`TrialJob` that keeps everything a trial
    has: its MLflow run, its row in the search state, its checkpoint (a folder named after
    it in the pack's checkpoint), its decision. Its results come under ``"members"``
    (:func:`member_results`)."""

    jobs: tuple[TrialJob, ...]

    @property
    def trial_id(self) -> str:
        """The Tune trial's name: the first member's id and how many more ride along."""
        return f"{self.jobs[0].trial_id}+{len(self.jobs) - 1}"

    @property
    def train(self) -> TrainConfig:
        return self.jobs[0].train

    @property
    def threads(self) -> int:
        return self.jobs[0].threads


# A pack's result: {member trial id: that member's result, as a solo trial's}, as JSON text (Tune
# flattens nested results on their way to the searcher; one string arrives as it was sent).
MEMBERS_KEY = "members"


def pack_result(members: dict[str, dict], **shared) -> dict:
    """A pack's report: the members' results (trial id -> result) and the pack's own keys."""
    return {**shared, MEMBERS_KEY: json.dumps(members)}


def job_summary(job: "TrialJob | PackJob") -> dict:
    """What a trial runs as flat, JSON-plain values: for Ray Tune's own logs (each trial's
    params.json; ``ExperimentAnalysis(...).dataframe()``'s ``config/trial/...`` columns), where
    the job itself is an object. The driver and the trainable read the job, never this.
    ``role``: ``candidate`` (a stage's: stage1..stageK, joint, constant, none) or ``final`` (a
    family's chosen schedule, retrained on a seed or, with ``evaluates``, the search trial that
    trained it evaluated on the test set); which candidate a stage chose is known only after it
    decides: report/search.json's ``stages[].winner``."""
    if isinstance(job, PackJob):
        return {"trial_id": job.trial_id, "members": [member.trial_id for member in job.jobs]}
    spec = job.spec
    return {"trial_id": spec.trial_id, "stage": spec.stage, "family": spec.family,
            "role": "final" if spec.stage == "final" else "candidate", **spec.params, "evaluates": spec.source_trial}


def job_of(trial) -> "TrialJob | PackJob":
    """The job of a Ray Tune ``Trial`` (driver side: callbacks, searcher)."""
    return trial.config[CONFIG_KEY]


def jobs_of(job: "TrialJob | PackJob") -> list[TrialJob]:
    """The trainings a trial runs: a pack's members, or the one job."""
    return list(job.jobs) if isinstance(job, PackJob) else [job]


def member_results(job: "TrialJob | PackJob", result: dict) -> dict[str, dict]:
    """Trial id -> its result in one report of a trial: a pack's members that reported in it
    (with the report's ``timestamp`` and ``time_total_s``), or the solo trial's result."""
    if not isinstance(job, PackJob):
        return {job.trial_id: result}
    shared = {k: result[k] for k in ("timestamp", "time_total_s", "node_id") if k in result}
    return {tid: {**shared, **r} for tid, r in json.loads(result.get(MEMBERS_KEY) or "{}").items()}
