"""A run's ``config.yaml`` (its resolved search space, ``--set`` applied) is what ``--space``
takes back: the session's smoke search run again from it, with the same profile, seed and
faults, writes the same ``results.csv``, byte for byte."""

import yaml

from focus_tune.config.space import dump_search_config, load_search_config, space_path
from smoke_search import GAME, RUN, cli, finish


def test_config_yaml_is_the_printed_config_of_the_run(smoke_search):
    folder = smoke_search.work / "runs" / RUN
    text = (folder / "config.yaml").read_text()
    assert text == dump_search_config(load_search_config(space_path(GAME), "smoke"))
    assert yaml.safe_load(text)["profiles"] == {"smoke": {}}


def test_config_yaml_fed_back_with_space_reproduces_the_results(smoke_search):
    folder = smoke_search.work / "runs" / RUN
    again = smoke_search.work.parent / "from-config-yaml"  # beside it: the same --data-root
    again.mkdir()
    finish(cli(again, "--space", str(folder / "config.yaml")))
    before = (folder / "report" / "results.csv").read_bytes()
    after = (again / "runs" / RUN / "report" / "results.csv").read_bytes()
    assert after == before
    assert (again / "runs" / RUN / "config.yaml").read_text().split("\n", 1)[1] == \
        (folder / "config.yaml").read_text().split("\n", 1)[1]  # the same but for the file it came from
