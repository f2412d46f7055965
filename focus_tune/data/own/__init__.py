"""One's own image -> event-sequence data into the store format (docs/DATA.md, "Your own data").

``write`` (``write_dataset``, the checks of the arrays and the core every importer writes
through).

Imports: the rest of ``focus_tune.data`` and the top-level base modules.
"""
