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

Modules: ``loading`` (the model: a folder, a run folder, an MLflow URI, a trial checkpoint),
``inputs`` (images, folders, dataset items, ``--prefix``), ``estimate`` (the Monte Carlo
estimates of one image), ``output`` (summary, Parquet, figures), ``cli``.

Imports: tracking (an MLflow URI), report (its figures' style), scoring, sim, the procedure
(a run folder's state, a checkpoint's job), data and the base modules; no Ray. ``pyfunc``
wraps it for MLflow.
"""

from ..lazy import exports

# Each public name -> the module of this package that defines it (``..errors``: the project's
# errors, focus_tune.errors), imported on first use (PEP 562), so that importing the package
# imports none of them.
_HOME = {
    "build_parser": "cli", "main": "cli", "run": "cli",
    "DEFAULT_ESTIMATOR": "estimate", "DEFAULT_SAMPLES": "estimate", "image_seed": "estimate",
    "predict_one": "estimate",
    "DEFAULT_ITEMS": "inputs", "IMAGE_SUFFIXES": "inputs", "Item": "inputs", "collect": "inputs",
    "load_image": "inputs", "parse_items": "inputs", "parse_prefix": "inputs",
    "Loaded": "loading", "PredictError": "..errors", "load": "loading",
    "MAX_HEATMAP_CLASSES": "output", "bands": "output", "plot_prediction": "output", "summary": "output",
    "write_parquet": "output",
}
__all__ = sorted(_HOME)

__getattr__, __dir__ = exports(__name__, _HOME, globals())
