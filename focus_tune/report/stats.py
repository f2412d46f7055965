"""NaN-aware statistics over seeds: mean ± SE, Welch tests against ``none``, the summary.

A missing key, None, a boolean or a NaN counts as no value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .columns import COMPARED, COMPARED_COLUMNS, CONDITIONAL, INTERVAL, MARGINAL


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


def welch(a: Iterable[Any], b: Iterable[Any]) -> tuple[float, float]:
    """(mean(a) - mean(b), two-sided Welch t-test p-value) over the finite values.

    The p-value is NaN with fewer than two values on either side or no spread at all.
    """
    from scipy import stats

    x, y = finite(a), finite(b)
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan
    diff = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2 or (x.std() == 0 and y.std() == 0):
        return diff, math.nan
    return diff, float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def differences(families: Sequence[str], finals: Mapping) -> dict[str, tuple[float, float]]:
    """{"<family>/<key>": (mean difference to none, Welch p)} for the compared families."""
    if "none" not in families:
        return {}
    out = {}
    for f in (f for f in COMPARED if f in families):
        for col in COMPARED_COLUMNS:
            diff, p = welch((r.get(col.key) for r in finals[f]), (r.get(col.key) for r in finals["none"]))
            if math.isfinite(diff):
                out[f"{f}/{col.key}"] = (diff, p)
    return out


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
    ``<family>/<metric>``, and the finite Welch p-values, keyed ``<family>/<metric>/welch_p_vs_none``."""
    out: dict[str, float] = {}
    for f in families:
        for key in metric_keys(finals[f]):
            mean, _ = aggregate(row.get(key) for row in finals[f])
            if key.startswith("test/") and math.isfinite(mean):
                out[f"{f}/{key}"] = mean
    for name, (_, p) in differences(families, finals).items():
        if math.isfinite(p):
            out[f"{name}/welch_p_vs_none"] = p
    return out
