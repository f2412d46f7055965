"""Replication: R independent searches of one scenario, and what holds across them.

``python -m focus_tune.replicate --game hero --runs 5`` runs the searches (``runner``), reads
their run folders (``summary``) and writes the replication's table (``markdown``), figure
(``figure``) and MLflow run (``record``). What varies between the searches: the search seed,
hence the built-in dataset's draw, every training's initial weights and batch order and the
Monte Carlo draws. What does not: code, grids, profile, machine.
"""
