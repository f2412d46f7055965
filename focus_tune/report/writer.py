"""Everything of a report into one folder: :func:`write_report` and the :class:`Report` it returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..durable import write_atomic
from .columns import class_name, is_conformal, ordered_families
from .figures import plot_entry_ece, plot_intervals, plot_reliability
from .markdown import plain_text, results_markdown
from .search_figure import plot_search
from .stats import summary
from .tables import write_csv
from .trace import SEARCH_JSON


@dataclass
class Report:
    """What :func:`write_report` produced.

    ``markdown`` is the text of results.md, ``table`` a plain-text table of the marginal and
    interval means ± SE for the end of a CLI run, ``files`` the written paths, and ``summary``
    the per-family means of every numeric ``test/...`` metric, keyed ``<family>/<metric>``.
    """

    markdown: str
    table: str
    files: list[Path] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    recommendation: Any = None  # the search's focus_tune.procedure.recommend.Recommendation, set by the search


def write_report(
    out_dir: Path,
    scenario: str,
    profile: str,
    finals: dict[str, list[dict]],
    schedules: dict[str, str],
    class_names: list[str],
    condition_class: int,
    search: Mapping | None = None,
    data_notes: Sequence[str] = (),
    overrides: Sequence[str] = (),
    recommendation: Sequence[str] = (),
) -> Report:
    """Write results.md, results.csv and the three figures into ``out_dir``; return a :class:`Report`.

    With ``search`` (a :func:`~focus_tune.report.search_trace`), also search.json, search.png,
    search.pdf and a section on the search in results.md.

    ``finals`` maps a family ("none", "constant", "time-dependent", the baselines of
    :data:`~focus_tune.report.ROWS`, any subset) to its flat test results, one per seed,
    each with its per-entry arrays as a dict under ``test_per_entry`` (optional; see
    :mod:`focus_tune.report.figures`); ``schedules`` maps a family to its compact schedule
    string. A family with no result is skipped with a note; missing or NaN metrics read ``n/a``.
    ``data_notes``: paragraphs on the data (absent reference rows, censoring), under "Data".
    ``overrides``: the search's ``--set KEY=VALUE`` texts, named under the title.
    ``recommendation``: the paragraphs of a "Which model to use" section (none: no section).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = ordered_families(finals)
    families = [f for f in ordered if finals[f]]
    skipped = [f for f in ordered if not finals[f]]
    condition = class_name(class_names, condition_class)
    title = f"{scenario} ({profile})"

    markdown = results_markdown(scenario, profile, families, skipped, finals, schedules, condition, search, data_notes,
                                overrides, recommendation)
    md_path = out_dir / "results.md"
    write_atomic(md_path, markdown)
    csv_path = out_dir / "results.csv"
    write_csv(csv_path, families, finals)
    models = [f for f in families if not is_conformal(f)]  # the figures draw each model once
    files = [
        md_path,
        csv_path,
        plot_entry_ece(out_dir / "entry_ece.png", models, finals, title),
        plot_reliability(out_dir / "reliability.png", models, finals, title),
        plot_intervals(out_dir / "intervals.png", models, finals, title),
    ]
    if search is not None:
        write_atomic(out_dir / SEARCH_JSON, json.dumps(search, indent=1))
        files += [out_dir / SEARCH_JSON, *plot_search(search, out_dir / "search.png", title)]
    return Report(markdown=markdown, table=plain_text(scenario, profile, families, finals),
                  files=files, summary=summary(families, finals))
