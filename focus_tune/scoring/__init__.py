"""How a model, a pack or a baseline is scored: plain numpy and PyTorch, no Ray, no MLflow.

``montecarlo`` (``estimate``, the one Monte Carlo estimator: counted or Rao-Blackwellized),
``evaluation`` (``draw_samples``, ``score``, ``evaluate``; ``Scoring``, how a split is scored),
``packed_eval`` (a pack's validation, every member at once), ``metrics`` (ECE, Brier, CE, AUC,
the interval metrics), ``survival`` (the censoring survival G and the inverse-probability
weights of censored data), ``temperature`` (post-hoc temperature scaling), ``conformal``
(split conformal time-to-event intervals), ``baselines`` (the image-blind, oracle and exact
rows).

Imports: sim (the math's other half: the sampler, the pack), the config, the data and the
top-level base modules; nothing of the procedure or above.
"""
