"""What the report shows: the families in the paper's order, their colours and the table columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..names import CONFORMAL, CONFORMAL_BASES, FAMILIES as SEARCH_FAMILIES, conformal_row

BASELINES = ("temperature-scaled", "time-dependent temperature", "image-blind", "image-Bayes", "oracle", "exact")
# The trained rows with I_0.9 calibrated by split conformal on the validation split: a table of their own.
CONFORMAL_ROWS = tuple(conformal_row(r) for r in CONFORMAL_BASES)
ROWS = (*SEARCH_FAMILIES, *BASELINES, *CONFORMAL_ROWS)  # every row of a report, in order
# Rows to compare against, not ranked with the models.
REFERENCES = ("image-blind", "image-Bayes", "oracle", "exact")
# What a baseline row is, in the chosen-schedules table.
BASELINE_SCHEDULES = {
    "temperature-scaled":
        "the none finals with one temperature chosen by validation sampled ECE (the search's tie rule)",
    "time-dependent temperature": "the none finals with T_1..T_k1 then one T for the rest, chosen as the schedule is",
    "image-blind": "M training sequences per item, no image",
    "image-Bayes": "M samples: an age from its posterior given the face, then the chain",
    "oracle": "M samples from the true process",
    "exact": "the true probabilities, no sampling",
}
def is_conformal(row: str) -> bool:
    """Whether ``row`` is a ``+conformal`` row (its own table, not the model tables)."""
    return row.endswith(" " + CONFORMAL)


def conformal_base(row: str) -> str:
    """The row a ``+conformal`` row calibrates ("none +conformal" -> "none")."""
    return row.removesuffix(" " + CONFORMAL)


FAMILY_COLORS = {"none": "black", "constant": "tab:blue", "time-dependent": "tab:red",
                 "temperature-scaled": "tab:orange", "time-dependent temperature": "sienna", "image-blind": "tab:gray",
                 "image-Bayes": "tab:cyan", "oracle": "tab:green", "exact": "tab:olive"}
OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink")
COVERAGE_TARGET = 0.9
PER_ENTRY_KEY = "test_per_entry"  # a result's entry-level arrays (a dict), the figures' input
NA = "n/a"


@dataclass(frozen=True)
class Column:
    """One table column: its label, the flat result key, and how the best mean is chosen.

    ``better`` is ``"min"``, ``"max"``, ``"target"`` (closest to :data:`COVERAGE_TARGET`),
    ``"zero"`` (closest to 0: a signed or debiased error) or ``None`` (not ranked). ``spread``
    False shows the mean alone (e.g. item counts).
    """

    label: str
    key: str
    better: str | None = "min"
    decimals: int = 4
    spread: bool = True
    optional: bool = False


MARGINAL = (
    Column("ECE", "test/marginal/ece"),
    Column("ECE debiased", "test/marginal/ece_debiased", better="zero", optional=True),
    Column("overconfidence", "test/marginal/overconfidence", better="zero", optional=True),
    Column("AUC", "test/marginal/auc", better="max"),
    Column("CE", "test/marginal/ce"),
    Column("BS", "test/marginal/brier"),
    Column("RMSE to exact", "test/marginal/rmse", optional=True),
    Column("leak", "test/marginal/leak", better=None, optional=True),
    Column("p(stay)", "test/marginal/p_stay", better=None, optional=True),
)
CONDITIONAL = (
    Column("ECE", "test/conditional/ece"),
    Column("AUC", "test/conditional/auc", better="max"),
    Column("CE", "test/conditional/ce"),
    Column("BS", "test/conditional/brier"),
    Column("items", "test/conditional/items", better=None, decimals=0, spread=False),
)
INTERVAL = (
    Column("coverage", "test/interval/coverage", better="target"),
    Column("relative width", "test/interval/relative_width"),
    Column("relative MAE", "test/interval/relative_mae"),
    Column("interval score", "test/interval/interval_score", optional=True),
    Column("CRPS", "test/interval/crps", optional=True),
)
SHORT_LABELS = {"calibrated level": "q", "RMSE to exact": "RMSE", "relative width": "rel.width",
                "relative MAE": "rel.MAE", "ECE debiased": "ECE-db", "overconfidence": "overconf",
                "interval score": "IS"}
COMPARED = ("constant", "time-dependent", "temperature-scaled", "time-dependent temperature")  # each against "none"
COMPARED_COLUMNS = (MARGINAL[0], MARGINAL[1], MARGINAL[4], MARGINAL[3], MARGINAL[6], INTERVAL[0], INTERVAL[1],
                    INTERVAL[3])
CONFORMAL_COLUMNS = (
    Column("calibrated level", "test/interval/conformal_level", better=None, decimals=3),
    *INTERVAL,
)
GROUP_COVERAGE_PREFIX = "test/interval/coverage_"  # coverage per group of items (FaceMed: age at the image)


def group_columns(finals: Mapping[str, Sequence[Mapping]]) -> list[Column]:
    """Coverage columns of the item groups the results carry (``test/interval/coverage_<group>``), in
    first-seen order."""
    keys = dict.fromkeys(k for rows in finals.values() for row in rows for k in row
                         if k.startswith(GROUP_COVERAGE_PREFIX))
    return [Column(k.removeprefix(GROUP_COVERAGE_PREFIX).replace("_", " "), k, better="target") for k in keys]


def ordered_families(finals: Mapping[str, Sequence]) -> list[str]:
    """The paper's families in the paper's order, then any other family in the given order."""
    return [f for f in ROWS if f in finals] + [f for f in finals if f not in ROWS]


def color(family: str, families: Sequence[str]) -> str:
    """The family's fixed colour; families outside :data:`ROWS` take the others in turn."""
    if family in FAMILY_COLORS:
        return FAMILY_COLORS[family]
    others = [f for f in families if f not in FAMILY_COLORS]
    return OTHER_COLORS[others.index(family) % len(OTHER_COLORS)]


def class_name(class_names: Sequence[str], index: int) -> str:
    """The name of class ``index``, or ``class <index>`` where the list has none."""
    return str(class_names[index]) if 0 <= index < len(class_names) else f"class {index}"
