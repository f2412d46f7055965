"""The recipe stage: ``python -m focus_tune.recipe`` and ``focus_tune.run_recipe``.

``tuning`` searches the unregularized model's training recipe for a dataset with Ray Tune's
OptunaSearch and ASHAScheduler on the validation CE, and writes the lambda search's space with
it (its command line too); ``__main__`` runs it.

Imports: ``focus_tune.search`` (its Ray runtime and storage), ``focus_tune.trial`` (a trial's training), tracking and
everything below; Ray.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it, imported on first use
# (PEP 562), so that importing the package imports none of them.
_HOME = {
    "RecipeResult": "tuning", "RecipeSpace": "tuning", "load_recipe_space": "tuning", "main": "tuning",
    "run_recipe": "tuning",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
