"""Final report of a search: the paper's three tables, a CSV and three figures.

:func:`write_report` takes the test results of the final models (one flat result per seed and
regularization family, as the trainable reports them) and writes into a run folder:

- ``results.md``: the chosen schedules and the paper's tables (marginal, conditional on the
  first entry, time-to-event interval), each cell the mean ± standard error over seeds, with
  the baselines (temperature-scaled, image-blind, image-Bayes, oracle, exact; see
  :mod:`focus_tune.scoring.baselines`) as rows beside the three families;
- ``results.csv``: one row per (family, seed) with every numeric metric, then a ``mean`` and
  an ``se`` row per family;
- ``entry_ece.png``, ``reliability.png``, ``intervals.png``: entry-level ECE (the oracle's
  curve is what a perfect simulator scores with the same M), reliability diagrams at the
  stored entries, and interval width against the true time, from each result's per-entry
  arrays (a dict under ``test_per_entry``);
- with ``search`` (from :func:`search_trace`): ``search.png`` and ``search.pdf``, the search
  itself (every stage's candidates' validation ECE against lambda and k2, the chosen path,
  the constant and unregularized references; each family's validation ECE over epochs),
  ``search.json`` with the numbers behind it, and a section with them in results.md.

Statistics are NaN-aware: a missing key or a NaN counts as no value, a cell with no value
reads ``n/a``, and a cell whose value count differs from the row's seed count says so. The
package is pure (numpy, matplotlib's Agg canvas, no pyplot state), so the driver can call it
after Ray has shut down and log :attr:`Report.summary` wherever it likes.

Modules: :mod:`.columns` (families, colours, table columns), :mod:`.stats` (mean ± SE, paired
tests with Holm's correction, summary), :mod:`.tables` (cells, tables, results.csv), :mod:`.markdown` (results.md),
:mod:`.figures` (the final models' figures), :mod:`.trace` and :mod:`.search_figure` (the
search), :mod:`.writer` (:func:`write_report`), :mod:`.cli` (``python -m focus_tune.report``).

Imports: the procedure (the racing rule's record), scoring and the base modules; no Ray, no
MLflow, nothing of the search.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it, imported on first use
# (PEP 562), so that importing the package imports none of them.
_HOME = {
    "main": "cli",
    "SEARCH_STYLE": "search_figure", "plot_search": "search_figure",
    "aggregate": "stats", "holm": "stats", "paired": "stats",
    "search_trace": "trace",
    "Report": "writer", "write_report": "writer",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
