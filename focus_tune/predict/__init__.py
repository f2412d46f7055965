"""Use a searched model: ``python -m focus_tune.predict --model URI IMAGE_OR_FOLDER...``.

For every input image, M sequences are sampled from the simulator (``evaluation.draw_samples``,
the sampler of the search) and turned into Monte Carlo estimates: the marginal probability
of every class at every entry, the same given a prefix of the first entries (``--prefix``,
exact conditioning: the prefix is forced while sampling), and the time to the event (END /
dead) with its interval I_alpha. ``--estimator rao_blackwell`` (the default) averages the
model's own conditionals p(y_i | x, sampled y_<i) over the M draws, unbiased and less noisy
than counting (docs/BENCHMARKS.md); ``--estimator counted`` gives the paper's class
frequencies and sampled-time quantiles (``montecarlo``). ``p_event_within_length`` is
counted from the draws either way.

The model is a final model of a search: an MLflow URI (``runs:/<parent run>/model-time-dependent``,
``models:/<model id>``, ``models:/<name>/<version>``), a search's run folder
(``runs/hero-quick-seed0``, then ``--family`` picks the model) or a model folder. Inputs are
image files, folders of images, or dataset folders (their ``--split`` items ``--items``,
with the truth beside the estimate).

Output: a summary on the terminal, ``--json`` (one JSON object per image and line),
``--parquet PATH`` (one row per image) and ``--figures DIR`` (one PNG per image).
Each image gets its own generator, seeded from ``--seed`` and the image's pixels: its
estimate does not depend on the other inputs or their order, the same image and seed give
the same numbers, and different images get independent Monte Carlo noise.
"""

from .cli import build_parser, main, run
from .estimate import DEFAULT_ESTIMATOR, DEFAULT_SAMPLES, image_seed, predict_one
from .inputs import DEFAULT_ITEMS, IMAGE_SUFFIXES, Item, collect, load_image, parse_items, parse_prefix
from .loading import Loaded, PredictError, load
from .output import MAX_HEATMAP_CLASSES, bands, plot_prediction, summary, write_parquet

__all__ = ["DEFAULT_ESTIMATOR", "DEFAULT_ITEMS", "DEFAULT_SAMPLES", "IMAGE_SUFFIXES", "MAX_HEATMAP_CLASSES", "Item",
           "Loaded", "PredictError", "bands", "build_parser", "collect", "image_seed", "load", "load_image", "main",
           "parse_items", "parse_prefix", "plot_prediction", "predict_one", "run", "summary", "write_parquet"]
