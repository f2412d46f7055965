"""Replication: R independent searches of one scenario, and what holds across them.

``python -m focus_tune.replicate --game hero --runs 5`` runs the searches (``runner``), reads
their run folders (``analysis``) and writes the replication's table (``replication_md``), figure
(``figure``) and MLflow run (``record``); ``regime`` checks each search's regime, ``verdict``
pools the scenarios (``python -m focus_tune.replicate.regime`` / ``.verdict``). What varies
between the searches: the search seed, hence the built-in dataset's draw, every training's
initial weights and batch order and the Monte Carlo draws. What does not: code, grids,
profile, machine.

Imports: report, tracking, the procedure, config, data and the base modules, and MLflow (in
``record`` and ``analysis``); it runs the search as a command line, not by import.
"""
