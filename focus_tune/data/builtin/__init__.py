"""The built-in scenarios' datasets: FaceMed and five Atari games, built offline.

``profiles`` (the dataset sizes per scenario and profile: the one table to edit), ``cache``
(``ensure_dataset``: build one, cached under a root per scenario, profile and seed),
``facemed`` and ``faces`` (FaceMed's generator and its drawn faces), ``ale`` (the Atari games
played by a scripted agent through ale-py), ``atari_head`` (importing Atari-HEAD's human play),
``process`` (``ScenarioProcess``: the true process each of ``facemed`` and ``ale`` registers for
its scenarios, which the report's reference rows draw from; ``cache.true_process`` finds it).

Imports: the rest of ``focus_tune.data`` and the top-level base modules.
"""
