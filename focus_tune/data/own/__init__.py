"""One's own image -> event-sequence data into the store format (docs/DATA.md, "Your own data").

``write`` (``write_dataset``, the public entry for arrays in memory, over ``write_core``, which
every importer writes through; the checks of names, folders, classes and images), ``table``
(``import-table``: CSV, Parquet or JSON Lines, and the rows' import the imagefolder shares),
``folder`` (``import-folder``: the imagefolder layout), ``arrays`` (``import-arrays``: an .npz).
The rules of a sequence (T, the observed entries) are in ``data.sequences``, the 70/20/10
split in ``data.splits``.

Imports: the rest of ``focus_tune.data`` and the top-level base modules.
"""
