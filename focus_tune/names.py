"""The project's domain names, each defined once. Plain Python (no torch, numpy, Ray or
MLflow), so that any module, light or heavy, imports them instead of repeating them."""

from __future__ import annotations

# The families of the paper's comparison, in its order, and the stage whose winner each is.
FAMILIES = ("none", "constant", "time-dependent")
FAMILY_STAGE = {"none": "none", "constant": "constant", "time-dependent": "joint"}

# The validation scores a stage may decide by (TrainConfig.select_by) -> their key in
# metrics.sequence_metrics (the debiased ECE is compared on its squared, unbiased scale),
# and how reports name them.
SELECT_KEYS = {"ece": "ece", "ece_debiased": "ece_debiased_sq", "brier": "brier", "ce": "ce"}
SELECT_NAMES = {"ece": "ECE", "ece_debiased": "debiased squared ECE", "brier": "Brier", "ce": "CE"}

# The unregularized finals with one validated temperature, a reference row of the report. A
# 'none' final reports its metrics under this prefix: a metric of a row other than the run's
# own model is named <row>/<split>/<group>/<metric>, on a final's run as on the search's parent
# run, so MLflow shows one naming scheme.
TEMPERATURE_SCALED = "temperature-scaled"
TS_PREFIX = f"{TEMPERATURE_SCALED}/test/"
# The unregularized finals with a temperature per entry chosen as the schedule is (T_1..T_k1
# one entry at a time on the validation ECE, then one T for the rest): the post-hoc rival
# that mirrors the method.
TIME_DEPENDENT_TEMPERATURE = "time-dependent temperature"
TDT_PREFIX = f"{TIME_DEPENDENT_TEMPERATURE}/test/"
TEMPERATURE_ROWS = (TEMPERATURE_SCALED, TIME_DEPENDENT_TEMPERATURE)  # the rows made of a 'none' final

# A trained row whose I_0.9 is calibrated by split conformal prediction on the validation split
# (focus_tune.scoring.conformal): the row "<family> +conformal". A final reports its own model's under
# CONFORMAL_PREFIX and, for 'none', its temperature-scaled model's under TS_CONFORMAL_PREFIX.
CONFORMAL = "+conformal"
CONFORMAL_PREFIX = "conformal/test/"
TS_CONFORMAL_PREFIX = f"{TEMPERATURE_SCALED}/{CONFORMAL_PREFIX}"
TDT_CONFORMAL_PREFIX = f"{TIME_DEPENDENT_TEMPERATURE}/{CONFORMAL_PREFIX}"
CONFORMAL_BASES = ("none", "constant", "time-dependent", *TEMPERATURE_ROWS)  # the rows calibrated
# What a 'none' final reports of the rows made of it (beside its own test/... and CONFORMAL_PREFIX).
FINAL_ROW_PREFIXES = (TS_PREFIX, TS_CONFORMAL_PREFIX, TDT_PREFIX, TDT_CONFORMAL_PREFIX)
# A temperature row's cost: the seconds of validation sampling its choice took (a 'none' final's result key).
POSTHOC_SECONDS = {TEMPERATURE_SCALED: "time/temperature_s",
                   TIME_DEPENDENT_TEMPERATURE: "time/time_dependent_temperature_s"}


def conformal_row(row: str) -> str:
    """The name of ``row``'s split conformal row: "none +conformal"."""
    return f"{row} {CONFORMAL}"

# The test metrics a user compares across searches: the parent run's metrics of each family
# (its logged model's metrics too) and, fewer, of the reference rows; the rest of the report is
# in its tables.
HEADLINE_METRICS = ("marginal/ece", "marginal/ece_debiased", "marginal/ce", "marginal/auc", "interval/coverage",
                    "interval/interval_score")
REFERENCE_HEADLINE = ("marginal/ece", "marginal/ce", "interval/coverage")

# A scenario's name (a built-in one's or one's own dataset's): it names folders, MLflow
# experiments and trial paths, so 1 to 64 letters, digits, '_', '.' and '-', starting with a
# letter or digit.
SCENARIO_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
# The search spaces' profiles (and the built-in data sizes); overconfident: the paper's regime
# (unregularized models overconfident), for the scenarios that reach it (search_spaces/*.yaml).
PROFILES = ("smoke", "quick", "overconfident", "paper")
ENCODERS = ("resnet18", "small")  # image encoders of the simulator
PRECISIONS = ("bf16", "fp32")  # a GPU's training arithmetic (TrainConfig.precision)
LR_SCHEDULES = ("constant", "onecycle", "decay")  # the learning rate over a training (sim.train.LearningRate)
RACING = ("off", "record", "stop")  # racing of a stage's candidates (focus_tune.procedure.racing)
JOINT_SEARCHES = ("grid", "optuna")  # how the joint lambda_all x k2 stage is searched
# How an evaluation samples the event class (TrainConfig.event_sampling): from the model at every
# entry, or forced to repeat once drawn (focus_tune.scoring.evaluation.evaluate).
EVENT_SAMPLING = ("model", "forced")
# The Monte Carlo estimators of every evaluation (focus_tune.scoring.montecarlo.estimate): the paper's
# counted frequencies of the M draws, or the same draws Rao-Blackwellized (the model's own
# conditionals averaged along them).
ESTIMATORS = ("counted", "rao_blackwell")

# Using a final model (python -m focus_tune.predict, its MLflow python_function): M, the seed
# and the estimator when none is given.
PREDICT_DEFAULTS = {"num_samples": 100, "seed": 0, "estimator": "rao_blackwell"}

# A saved final model (focus_tune.sim.model_io): its weights and its config / metadata.
MODEL_WEIGHTS = "weights.npz"
MODEL_JSON = "model.json"
