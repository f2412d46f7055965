"""Training with torch.optim.Adam without importing torch._dynamo.

torch.optim keeps torch.compile out of its optimizers by importing torch._dynamo on their
first use: ``Adam.step`` (``_use_grad_for_differentiable``) imports it for a graph break, and
``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` carry
``torch._disable_dynamo``, which imports it on the first call. That import costs about a
CPU-second in every process that trains: every trial's actor, two or more per search, some
forty searches in the test suite (docs/BENCHMARKS.md, "The test suite"). Nothing in focus_tune
is compiled, so :func:`eager_optimizers`, called where a process that trains starts (the
trainable's entry ``trainable.run_trial``, solo trials and packs alike, and the benchmarks
that train; importing focus_tune changes nothing in torch), lets those calls skip it:

* the four methods call themselves: the wrapper's per-function cache (the attribute
  ``torch._compile._disable_dynamo`` looks up before importing) is set to the method itself;
* ``Adam.step`` gets the same grad-mode handling as ``_use_grad_for_differentiable`` (grad
  enabled only for a differentiable optimizer, restored after) without the graph breaks,
  which do nothing outside torch.compile; torch's own step hooks and profiler label stay.

The same code runs either way, so the numbers are the same (``tests/test_eager.py`` trains
and checkpoints both ways, bit for bit). Where torch._dynamo is already imported (someone may
compile) or torch's wrappers are not what this expects, nothing is changed.
"""

from __future__ import annotations

import functools
import sys

import torch

METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_CACHE = "__dynamo_disable"  # the attribute torch._compile._disable_dynamo caches its wrapped call in


def _use_grad_layer(step):
    """(the step under the profile hook or None, the ``_use_grad`` wrapper) of ``step``, or None."""
    hooked = step if getattr(step, "hooked", False) else None
    inner = step.__wrapped__ if hooked is not None else step
    code = getattr(inner, "__code__", None)  # update_wrapper gave it the step's own names
    if getattr(code, "co_qualname", None) != "_use_grad_for_differentiable.<locals>._use_grad" \
            or not hasattr(inner, "__wrapped__"):
        return None
    return hooked, inner


def eager_optimizers() -> bool:
    """Make torch.optim.Adam's calls skip the torch._dynamo import (module docstring). True if
    they do now (or did already); False if nothing was changed."""
    if "torch._dynamo" in sys.modules:
        return False
    adam = torch.optim.Adam
    if getattr(adam.step, "eager", False):  # torch's profile hook copies the attribute (functools.wraps)
        return True
    plain = [getattr(getattr(torch.optim.Optimizer, name), "__wrapped__", None) for name in METHODS]
    layer = _use_grad_layer(adam.step)
    if any(fn is None for fn in plain) or layer is None:
        return False
    for fn in plain:
        if getattr(fn, _CACHE, None) is None:
            setattr(fn, _CACHE, fn)
    hooked, use_grad = layer
    raw = use_grad.__wrapped__

    @functools.wraps(raw)
    def step(self, *args, **kwargs):
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return raw(self, *args, **kwargs)
        finally:
            torch.set_grad_enabled(previous)

    step.eager = True
    if hooked is None:
        adam.step = step  # the first Adam adds torch's profile hook around it, as it would have
    else:
        adam.step = torch.optim.Optimizer.profile_hook_step(step)
        adam.step.hooked = True
    return True
