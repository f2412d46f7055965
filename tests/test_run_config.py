"""A run's ``config.yaml`` is its resolved search space (``--set`` applied), printed as
``--space`` takes it back. That it reproduces the run, results.csv byte for byte, is tested
where a search already runs from it: test_search_e2e's killed and resumed search."""

import yaml

from focus_tune.config.space import dump_search_config, load_search_config, space_path
from smoke_search import GAME, RUN


def test_config_yaml_is_the_printed_config_of_the_run(smoke_search):
    folder = smoke_search.work / "runs" / RUN
    text = (folder / "config.yaml").read_text()
    assert text == dump_search_config(load_search_config(space_path(GAME), "smoke"))
    assert yaml.safe_load(text)["profiles"] == {"smoke": {}}
