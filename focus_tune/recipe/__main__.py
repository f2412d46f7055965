"""``python -m focus_tune.recipe``: the recipe stage's command line (``focus_tune.recipe.tuning``).

Searches the unregularized model's training recipe for a dataset with Ray Tune's OptunaSearch
and ASHAScheduler on the validation CE, and writes the lambda search's space with it.
"""

from __future__ import annotations

from .tuning import main

if __name__ == "__main__":
    raise SystemExit(main())
