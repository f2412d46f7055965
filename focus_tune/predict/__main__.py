"""``python -m focus_tune.predict``: the command line of :mod:`focus_tune.predict.cli`."""

import sys

from .cli import main

sys.exit(main())
