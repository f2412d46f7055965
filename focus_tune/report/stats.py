"""NaN-aware statistics over seeds: mean ± SE, paired tests against ``none`` with Holm's
correction, the summary.

A missing key, None, a boolean or a NaN counts as no value.

The families' finals share their seeds: the final of seed s of every family starts from the
same initial weights, sees the batches in the same order and is tested with the same Monte
Carlo uniforms (``temperature-scaled`` is the ``none`` final of that seed itself). So a
family is compared with ``none`` seed by seed (a paired t-test on the per-seed differences),
which removes the part of the seed-to-seed spread the two share; an unpaired (Welch) test
would count it as noise. The differences table makes many tests at once (families x
metrics), so each p-value is also given Holm-adjusted over the whole table (family-wise
error at the stated level).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .columns import COMPARED, COMPARED_COLUMNS, CONDITIONAL, INTERVAL, MARGINAL

P_KEYS = ("paired_p_vs_none", "holm_p_vs_none")  # the summary's p-value suffixes


@dataclass(frozen=True)
class Stat:
    """Mean, standard error and the number of finite values behind them."""

    mean: float
    se: float
    n: int


def to_float(value: Any) -> float:
    """A float, or NaN for None, booleans and anything that is not a number."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def finite(values: Iterable[Any]) -> np.ndarray:
    """The finite values as a float array (see :func:`to_float`)."""
    x = np.array([to_float(v) for v in values], dtype=np.float64)
    return x[np.isfinite(x)]


def aggregate(values: Iterable[Any]) -> tuple[float, float]:
    """Mean and standard error of the finite values (NaN, None and non-numbers are ignored).

    SE = sample standard deviation (ddof=1) / sqrt(n). With no finite value both are NaN;
    with one, the mean is that value and the SE is NaN.
    """
    x = finite(values)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def stat(rows: Sequence[Mapping[str, Any]], key: str) -> Stat:
    """The :class:`Stat` of one key over the rows (one row per seed)."""
    values = [row.get(key) for row in rows]
    mean, se = aggregate(values)
    return Stat(mean, se, int(finite(values).size))


@dataclass(frozen=True)
class Difference:
    """A family's paired difference to ``none`` on one metric."""

    diff: float  # mean over the shared seeds of (family - none)
    p: float  # two-sided paired t-test p-value (NaN: fewer than 2 pairs, or no spread)
    holm: float  # p Holm-adjusted over the table's tests (NaN where p is)
    pairs: int  # seeds with a finite value on both sides
    detectable: float = math.nan  # see :func:`detectable_difference`


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference that a two-sided paired t-test at ``alpha`` finds with
    probability ``power``, for n pairs whose differences have standard deviation ``sd``:
    (t_{1 - alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n), the usual approximation of the
    noncentral t. Before Holm's adjustment; NaN for fewer than 2 pairs. With the observed
    ``sd`` of 3 seeds, itself a rough estimate: read it as an order of magnitude."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    df = n - 1
    return float((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * sd / math.sqrt(n))


# Student's t through scipy.special, the functions scipy.stats.t itself calls (t.ppf is
# stdtrit, t.sf(x) is stdtr(df, -x)): importing scipy.stats costs a search's report about a
# CPU-second more than scipy.special (tests/test_report.py compares both with scipy.stats).
def t_quantile(q: float, df: int) -> float:
    """The q-quantile of Student's t with ``df`` degrees of freedom (scipy.stats.t.ppf)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def paired_differences(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """The per-seed differences a - b of ``key`` over the seeds present in both row lists with a
    finite value on both sides (rows match by their ``seed``), in the order of ``a``."""
    b_by_seed = {row.get("seed"): to_float(row.get(key)) for row in b}
    d = np.array([to_float(row.get(key)) - b_by_seed.get(row.get("seed"), math.nan) for row in a], dtype=np.float64)
    return d[np.isfinite(d)]


def paired(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float, int]:
    """(mean difference a - b, two-sided paired t-test p-value, pairs) of ``key`` over the
    :func:`paired_differences`. The p-value is NaN with fewer than two pairs or identical
    differences; the difference is NaN without a pair.
    """
    d = paired_differences(a, b, key)
    return (*one_sample_test(d), int(d.size))


def one_sample_test(d: np.ndarray) -> tuple[float, float]:
    """(mean, two-sided one-sample t-test p-value against 0) of differences: per seed (see
    :func:`paired`) or per replicated search (focus_tune.replicate). The p-value is
    scipy.stats.ttest_1samp's: t = mean / sqrt(var / n) (var with n - 1), p = 2 P(T > |t|)."""
    from scipy.special import stdtr

    if d.size == 0:
        return math.nan, math.nan
    if d.size < 2 or np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):  # no spread: no test
        return float(d.mean()), math.nan
    mean = float(d.mean())
    t = mean / math.sqrt(float(d.var(ddof=1)) / d.size)
    return mean, float(2.0 * stdtr(d.size - 1, -abs(t)))


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values: the i-th smallest of m finite
    p-values becomes max_{j <= i} min(1, (m - j + 1) p_(j)). NaN stays NaN and is not counted."""
    ranked = sorted((p, k) for k, p in pvalues.items() if math.isfinite(p))
    m, running, out = len(ranked), 0.0, {k: math.nan for k in pvalues}
    for i, (p, k) in enumerate(ranked):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


def differences(families: Sequence[str], finals: Mapping) -> dict[str, Difference]:
    """{"<family>/<key>": :class:`Difference` to none} for the compared families and columns,
    paired by seed, Holm-adjusted over all of them together."""
    if "none" not in families:
        return {}
    raw = {}
    for f in (f for f in COMPARED if f in families):
        for col in COMPARED_COLUMNS:
            d = paired_differences(finals[f], finals["none"], col.key)
            if d.size:
                sd = float(d.std(ddof=1)) if d.size >= 2 else math.nan
                raw[f"{f}/{col.key}"] = (*one_sample_test(d), int(d.size), detectable_difference(sd, d.size))
    adjusted = holm({k: p for k, (_, p, _, _) in raw.items()})
    return {k: Difference(diff, p, adjusted[k], n, mde) for k, (diff, p, n, mde) in raw.items()}


def metric_keys(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Numeric keys of the flat results but the seed: the table metrics first, then the rest sorted."""
    found: set[str] = set()
    for row in rows:
        found |= {k for k, v in row.items() if k != "seed"
                  and isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}
    first = [c.key for c in (*MARGINAL, *CONDITIONAL, *INTERVAL) if c.key in found]
    return first + sorted(found - set(first))


def summary(families: Sequence[str], finals: Mapping) -> dict[str, float]:
    """Per-family means of every numeric ``test/...`` metric (finite ones only), keyed
    ``<family>/<metric>``, and the finite p-values of the differences, keyed
    ``<family>/<metric>/paired_p_vs_none`` and (Holm-adjusted) ``.../holm_p_vs_none``."""
    out: dict[str, float] = {}
    for f in families:
        for key in metric_keys(finals[f]):
            mean, _ = aggregate(row.get(key) for row in finals[f])
            if key.startswith("test/") and math.isfinite(mean):
                out[f"{f}/{key}"] = mean
    for name, d in differences(families, finals).items():
        if math.isfinite(d.p):
            out[f"{name}/{P_KEYS[0]}"] = d.p
            out[f"{name}/{P_KEYS[1]}"] = d.holm
    return out
