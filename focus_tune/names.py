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

PROFILES = ("smoke", "quick", "paper")  # the search spaces' profiles (and the built-in data sizes)
ENCODERS = ("resnet18", "small")  # image encoders of the simulator
JOINT_SEARCHES = ("grid", "optuna")  # how the joint lambda_all x k2 stage is searched

# Using a final model (python -m focus_tune.predict, its MLflow python_function): M, the seed
# and the estimator when none is given.
PREDICT_DEFAULTS = {"num_samples": 100, "seed": 0, "estimator": "rao_blackwell"}

# A saved final model (focus_tune.model_io): its weights and its config / metadata.
MODEL_WEIGHTS = "weights.npz"
MODEL_JSON = "model.json"
