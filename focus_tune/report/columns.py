"""What the report shows: the families in the paper's order, their colours and the table columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

BASELINES = ("temperature-scaled", "image-blind", "oracle")
FAMILIES = ("none", "constant", "time-dependent", *BASELINES)
REFERENCES = ("image-blind", "oracle")  # rows to compare against, not ranked with the models
# What a baseline row is, in the chosen-schedules table.
BASELINE_SCHEDULES = {
    "temperature-scaled": "the none finals, one temperature per entry fitted on validation",
    "image-blind": "training frequencies, no image",
    "oracle": "M samples from the true process",
}
FAMILY_COLORS = {"none": "black", "constant": "tab:blue", "time-dependent": "tab:red",
                 "temperature-scaled": "tab:orange", "image-blind": "tab:gray", "oracle": "tab:green"}
OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive")
COVERAGE_TARGET = 0.9
PER_ENTRY_KEY = "test_per_entry"  # a result's entry-level arrays (a dict), the figures' input
NA = "n/a"


@dataclass(frozen=True)
class Column:
    """One table column: its label, the flat result key, and how the best mean is chosen.

    ``better`` is ``"min"``, ``"max"``, ``"target"`` (closest to :data:`COVERAGE_TARGET`) or
    ``None`` (not ranked). ``spread`` False shows the mean alone (e.g. item counts).
    """

    label: str
    key: str
    better: str | None = "min"
    decimals: int = 4
    spread: bool = True
    optional: bool = False


MARGINAL = (
    Column("ECE", "test/marginal/ece"),
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
)
SHORT_LABELS = {"RMSE to exact": "RMSE", "relative width": "rel.width",
                "relative MAE": "rel.MAE"}
COMPARED = ("constant", "time-dependent", "temperature-scaled")  # each against "none"
COMPARED_COLUMNS = (MARGINAL[0], MARGINAL[2], MARGINAL[1], MARGINAL[4], INTERVAL[0], INTERVAL[1])


def ordered_families(finals: Mapping[str, Sequence]) -> list[str]:
    """The paper's families in the paper's order, then any other family in the given order."""
    return [f for f in FAMILIES if f in finals] + [f for f in finals if f not in FAMILIES]


def color(family: str, families: Sequence[str]) -> str:
    """The family's fixed colour; families outside :data:`FAMILIES` take the others in turn."""
    if family in FAMILY_COLORS:
        return FAMILY_COLORS[family]
    others = [f for f in families if f not in FAMILY_COLORS]
    return OTHER_COLORS[others.index(family) % len(OTHER_COLORS)]


def class_name(class_names: Sequence[str], index: int) -> str:
    """The name of class ``index``, or ``class <index>`` where the list has none."""
    return str(class_names[index]) if 0 <= index < len(class_names) else f"class {index}"
