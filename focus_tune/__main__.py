"""``python -m focus_tune`` is the search CLI (``python -m focus_tune.search``)."""

import sys

from .search import main

sys.exit(main())
