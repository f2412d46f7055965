"""The recipe stage: ``python -m focus_tune.recipe`` and ``focus_tune.run_recipe``.

``tuning`` searches the unregularized model's training recipe for a dataset with Ray Tune's
OptunaSearch and ASHAScheduler on the validation CE, and writes the lambda search's space with
it (its command line too); ``__main__`` runs it.

Imports: ``focus_tune.search`` (its Ray runtime, storage and trainable), tracking and
everything below; Ray.
"""

from importlib import import_module

# Each public name -> the module of this package that defines it, imported on first use
# (PEP 562), so that importing the package imports none of them.
_HOME = {
    "RecipeResult": "tuning", "RecipeSpace": "tuning", "load_recipe_space": "tuning", "main": "tuning",
    "run_recipe": "tuning",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value  # later lookups are plain attributes
    return value


def __dir__():
    return sorted([*globals(), *_HOME])
