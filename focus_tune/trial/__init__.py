"""One trial in plain PyTorch, below Ray: its training, validation, checkpoints and a final's scoring.

``training`` (``epochs``, the one loop over epochs, the only caller of ``train_one_epoch``;
``validate``; ``train_trial``, a search trial that yields each epoch's result and checkpoint
state; ``score_trained``, a final of an already-trained model), ``pack`` (``train_pack``: a
pack's members as one program, each as alone), ``final`` (``score_final``: a final's test
metrics, its conformal row and temperature baseline; ``split_weights``, the censoring
weights), ``on_device`` (``TrialSplits``: the splits moved to the trial's device once),
``checkpoint`` (the one checkpoint schema, written and read). The Ray adapters
(``search.trainable``, ``recipe.tuning``) only report what it yields and checkpoint it.

Imports: the procedure (``TrialJob``, ``PackJob``, ``Splits``), the math (sim, scoring), the
config, the data and the top-level base modules; no Ray, no MLflow, nothing above.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it, imported on first use
# (PEP 562), so that importing the package imports none of them.
_HOME = {
    "CHECKPOINT_FILE": "checkpoint", "checkpoint_state": "checkpoint", "read_checkpoint": "checkpoint",
    "write_checkpoint": "checkpoint",
    "fit_temperature": "final", "score_final": "final", "split_weights": "final",
    "TrialSplits": "on_device",
    "PackEpoch": "pack", "train_pack": "pack",
    "Epoch": "training", "Training": "training", "epochs": "training", "new_model": "training",
    "score_trained": "training", "train_trial": "training", "validate": "training", "validation_step": "training",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
