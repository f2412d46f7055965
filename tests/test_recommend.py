"""The model a search recommends (focus_tune.procedure.recommend): by the validation evidence and the
search's tie rule, with the conformal level of its intervals where that is usable."""

from __future__ import annotations

import math

from focus_tune.procedure.recommend import recommend


def finals(none, constant, td, levels=(None, None, None)):
    """(validation scores, report rows) of three families over their seeds."""
    scores, rows = {}, {}
    for family, values, level in zip(("none", "constant", "time-dependent"), (none, constant, td), levels):
        scores[family] = dict(enumerate(values))
        rows[family] = [{"seed": s, "test/marginal/ece": 0.5} for s in range(len(values))]
        if level is not None:
            rows[f"{family} +conformal"] = [{"seed": s, "test/interval/conformal_level": level + 0.01 * s}
                                            for s in range(len(values))]
    return scores, rows


def test_the_lowest_validation_score_wins_beyond_the_tie_rule():
    # time-dependent lowest by a margin far beyond the paired SE of its differences
    rec = recommend(*finals([0.050, 0.052, 0.051], [0.049, 0.051, 0.050], [0.030, 0.031, 0.032]), "ece", 1.0, 0.9)
    assert rec.family == "time-dependent" and rec.level is None
    assert "the lowest validation ECE" in rec.reason and "below constant's" in rec.reason
    assert rec.predict_flags("rao_blackwell", 50) == ""


def test_a_less_penalized_family_within_the_noise_wins():
    # time-dependent lowest by 0.001 with differences that vary by more: none is within 1 SE
    rec = recommend(*finals([0.031, 0.036, 0.029], [0.040, 0.041, 0.042], [0.032, 0.031, 0.030]), "ece", 1.0, 0.9)
    assert rec.family == "none" and "within 1 SE" in rec.reason and "time-dependent's" in rec.reason
    # the paper's rule (tie_se 0): the lowest wins
    assert recommend(*finals([0.031, 0.036, 0.029], [0.040, 0.041, 0.042], [0.032, 0.031, 0.030]),
                     "ece", 0.0, 0.9).family == "time-dependent"


def test_the_conformal_level_of_the_models_seed():
    f = finals([0.05, 0.05, 0.05], [0.06, 0.06, 0.06], [0.07, 0.07, 0.07], levels=(0.95, 0.9, 0.9))
    rec = recommend(*f, "ece", 1.0, 0.9, model_seed=1)
    assert rec.family == "none" and rec.level == 0.96  # seed 1's level
    assert "too narrow" in rec.reason and rec.predict_flags("rao_blackwell", 50) == \
        "--estimator rao_blackwell --num-samples 50 --alpha 0.96 "
    assert any("coverage of at least 0.9" in line for line in rec.lines)
    # a level of 1 or more is no interval level: the model's own I_0.9
    f[1]["none +conformal"] = [{"seed": s, "test/interval/conformal_level": math.inf} for s in range(3)]
    rec = recommend(*f, "ece", 1.0, 0.9)
    assert rec.level is None and any("not finite" in line for line in rec.lines)


def test_no_validation_score_no_recommendation():
    assert recommend({"none": {0: None}}, {"none": [{"seed": 0}]}, "ece", 1.0, 0.9) is None
