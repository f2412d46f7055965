"""A package's public names, imported on first use (PEP 562).

A package ``__init__`` lists each public name with the module of the package that defines it
and hands the list to :func:`exports`::

    _HOME = {"load_dataset": "dataset_reader", "ensure_dataset": "builtin.cache"}
    __all__ = sorted(_HOME)
    __getattr__, __dir__ = exports(__name__, _HOME, globals())

so importing the package imports none of its modules (Ray-free code can live in a package
whose other modules import Ray). A name defined below the package is written as a relative
import, as in the package's ``__init__``: ``"ConfigError": "..errors"`` (``focus_tune.errors``).
Plain Python, importing nothing of the project: every package ``__init__`` may import it.
"""

from importlib import import_module


def exports(package: str, home: dict[str, str], namespace: dict):
    """The package's ``__getattr__`` and ``__dir__``: a name of ``home`` is imported from
    ``package.<home[name]>`` (or, for a value with leading dots, from that relative module) on
    first use and kept in ``namespace`` (the package's globals), so later lookups are plain
    attributes; any other name is an AttributeError."""

    def __getattr__(name: str):
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = home[name] if home[name].startswith(".") else f".{home[name]}"
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted([*namespace, *home])

    return __getattr__, __dir__
