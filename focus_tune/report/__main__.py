"""``python -m focus_tune.report RESULTS_CSV`` (see :func:`focus_tune.report.cli.main`)."""

from .cli import main

raise SystemExit(main())
