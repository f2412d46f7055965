"""The search's configuration: typed, and validated once, at the edge.

``space`` (``TrainConfig``, ``GridConfig``, ``SearchConfig``; a search space file
``search_spaces/<scenario>.yaml`` loaded at a profile, ``--set`` overrides, the resolved YAML),
``fields`` (each field's check and ``ConfigError``; the rule of a lambda), ``strict_yaml``
(the YAML reader: YAML 1.2's core schema, no duplicate keys, bounded size), ``generic`` (the
search space of one's own data, fitted to its length), ``scenarios`` (which scenario a dataset
folder is). docs/CONFIG.md is generated from it (``python scripts/config_doc.py``).

Imports: the data (``scenarios`` reads a manifest) and the top-level base modules; nothing of
the math, the procedure or above.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it (``..errors``: the project's
# errors, focus_tune.errors), imported on first use (PEP 562), so that importing the package
# imports none of them.
_HOME = {
    "ConfigError": "..errors",
    "ENCODERS": "space", "ESTIMATORS": "space", "EVENT_SAMPLING": "space",
    "GridConfig": "space", "MAX_DEPTH": "space", "MAX_FILE_BYTES": "space", "MAX_INT": "space", "MAX_K2": "space",
    "MAX_NODES": "space", "PRECISIONS": "space", "PROFILES": "space", "SELECT_BY": "space", "SETTABLE": "space",
    "SPACES_DIR": "space", "SearchConfig": "space", "TrainConfig": "space", "apply_overrides": "space",
    "dump_search_config": "space", "load_search_config": "space", "override_text": "space",
    "parse_override": "space", "parse_search_space": "space", "space_path": "space", "yaml_text": "space",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
