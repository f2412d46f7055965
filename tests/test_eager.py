"""focus_tune.sim.adam_patch: training with torch.optim.Adam without importing torch._dynamo, the same
numbers as through torch's own wrappers."""

import subprocess
import sys
from pathlib import Path

import torch

RUN = """
import sys, torch
if sys.argv[1] == "torch":
    import torch._dynamo  # first: focus_tune.sim.adam_patch then leaves torch's wrappers as they are
from focus_tune.sim import train
from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.model import Simulator

patched = eager_optimizers()  # where a process that trains starts, as a trial's does
from focus_tune.sim.regularization import LambdaSchedule
from test_train import chain_split

gen = train.seed_everything(0)
model = Simulator(3, encoder="small", embed_dim=8, hidden=8)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
steps = []
opt.register_step_post_hook(lambda o, args, kwargs: steps.append(torch.is_grad_enabled()))
data = chain_split(64, 6, 1)
losses = []
for epoch in range(2):
    losses.append(train.train_one_epoch(model, opt, data, LambdaSchedule.none(6).tensor(), 16, gen)["train/loss"])
    state = opt.state_dict()  # a checkpoint's round trip, into a new optimizer, as a resumed trial does
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    opt.load_state_dict(state)
torch.save({"params": [p.detach() for p in model.parameters()], "opt": opt.state_dict(), "losses": losses,
            "eager": patched, "dynamo": "torch._dynamo" in sys.modules, "hook": steps,
            "grad": torch.is_grad_enabled()}, sys.argv[2])
"""


def _run(mode: str, out: Path) -> dict:
    subprocess.run([sys.executable, "-c", RUN, mode, str(out)], check=True, capture_output=True,
                   cwd=Path(__file__).parent)
    return torch.load(out)


def test_adam_trains_without_torch_dynamo_and_as_through_torchs_wrappers(tmp_path):
    eager, wrapped = _run("eager", tmp_path / "eager.pt"), _run("torch", tmp_path / "torch.pt")
    assert (eager["eager"], eager["dynamo"]) == (True, False)
    assert (wrapped["eager"], wrapped["dynamo"]) == (False, True)  # torch._dynamo imported first: left alone
    # torch's step hooks still run, after the step, grad mode restored (the step itself updates the
    # parameters in place, which raises with grad enabled)
    assert eager["hook"] == wrapped["hook"] == [True] * 4
    assert eager["grad"] and wrapped["grad"]  # grad mode restored after each step
    assert eager["losses"] == wrapped["losses"]
    assert all(torch.equal(a, b) for a, b in zip(eager["params"], wrapped["params"], strict=True))
    a, b = eager["opt"], wrapped["opt"]
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for key, state in a["state"].items():
        assert state.keys() == b["state"][key].keys()
        assert all(torch.equal(state[k], b["state"][key][k]) for k in state)


TRIAL = """
import sys, torch
import focus_tune.sim.model as m
import focus_tune.search.trainable as trainable

imported = getattr(torch.optim.Adam.step, "eager", False)  # importing the trainable leaves torch as it is
try:
    trainable.run_trial({"job": None}, None)  # its entry applies the patch first, then finds no job
except AttributeError:
    pass
model = m.Simulator(5, "resnet18", 32, 32, encoder_width=16)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.long)).sum().backward()
opt.step()
opt.zero_grad()
opt.load_state_dict(opt.state_dict())
print(imported, "torch._dynamo" in sys.modules)
"""


def test_a_trial_process_does_not_import_torch_dynamo():
    """The imports of a trial's actor, its entry (where the patch is applied, not at import), a
    model, an optimizer and its checkpoint's state."""
    out = subprocess.run([sys.executable, "-c", TRIAL], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"
