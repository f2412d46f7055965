"""The staged search as data and rules: what to train, in which order, and what it decided. No Ray.

``plan`` (the results so far -> the trials runnable now, a pure replay; the tie rule),
``trials`` (``TrialSpec``, ``Batch``, ``StageWinner``: the plan's vocabulary; ``priority``),
``job`` (``TrialJob``, ``PackJob``: the typed contract a trial carries through Ray), ``state``
(search_state.json, its one reader and writer), ``racing`` (the rule that stops a candidate
that has clearly lost), ``optuna_joint`` (the joint stage searched by Optuna), ``cost`` (the
``--dry-run`` cost and a finished search's efficiency), ``rates`` (the time of a training: from
``--trial-minutes``, an earlier run or the measured GPU rates, ``gpu_rates.json`` and
``gpu_pack_rates.json`` beside it), ``recommend`` (the model a finished search recommends).

Imports: the math (sim, scoring), the config, the data, the top-level base modules and Optuna;
no Ray, nothing of tracking, report, predict or the commands.
"""
