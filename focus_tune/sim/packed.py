"""Packed training: K simulators of one architecture in one forward and backward.

On a GPU one small simulator per process leaves the card nearly idle: one Python process
launching small kernels sets the pace (docs/BENCHMARKS.md, GPU). A pack stacks the
parameters of K members (``torch.func.stack_module_state``) and runs them as one program:

- the encoder as one dense convolution stack per member in the same step, through
  ``torch.func.functional_call`` on slices of the stacked tensors (BatchNorm keeps each
  member's running statistics, which are stacked buffers). ``vmap`` over the members (grouped
  convolutions) was tried and dropped: on CUDA its BatchNorm failed under channels_last
  (fp32) and in bf16's backward;
- on a GPU, the LSTM as a batched recurrence, one ``baddbmm`` per entry for all members (the
  input-to-gate product depends only on the previous class: a table of c + 1 rows per
  member, applied as a product with the one-hot inputs), and the head as one ``baddbmm``;
  on a CPU, the solo model's own LSTM and head calls member by member, so that a member is
  bit for bit the trial it replaces (tests compare them with ``==``);
- on a GPU, the whole step (gather, forward, backward, Adam) captured once as a CUDA graph
  (:class:`PackTrainer`), which removes the launch cost of the per-entry kernels.

Each member keeps its own initial weights (its seed), lambda schedule, batch order (its own
generator), Adam state (Adam is elementwise, so one Adam over the stacked tensors is K Adams)
and, for replication, its own dataset. A member trains exactly as the same trial alone, up
to floating-point reordering on a GPU, and exactly on a CPU (tests/test_packed.py). A member whose
loss turns NaN or infinite is marked failed with the same message a solo trial raises; its
numbers stay its own (no operation mixes members), and the others go on.

:func:`member_state_dict` and :func:`load_member` convert between a member and a
:class:`~focus_tune.sim.model.Simulator`'s state dict, so checkpoints, evaluation and final
models are the solo ones. On a CPU packing does not pay (FINDINGS: a vmapped encoder is
0.95-1.3x a solo one per model, a batched LSTM slower than oneDNN's): it is for accelerators.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state

from .device_split import DeviceSplit, stacked_observed
from .model import Simulator
from .regularization import regularized_loss
from .train import LearningRate, set_lr


class PackedSimulator:
    """K :class:`Simulator` s of one architecture as stacked tensors (leading dimension K).

    ``params`` (leaves that require grad) and ``buffers`` are dicts keyed like the solo
    model's ``state_dict``; ``base`` is a parameterless copy on the meta device that
    ``functional_call`` runs with them.
    """

    def __init__(self, models: Sequence[Simulator]):
        if not models:
            raise ValueError("a pack needs at least one member")
        shapes = {tuple((k, tuple(v.shape)) for k, v in m.state_dict().items()) for m in models}
        if len(shapes) != 1:
            raise ValueError("every member of a pack must have the same architecture")
        first = models[0]
        self.num_classes, self.hidden, self.start_token = first.num_classes, first.hidden, first.start_token
        self.size = len(models)
        for m in models:  # stack_module_state wants one mode; the pack starts in training mode
            m.train()
        params, buffers = stack_module_state(list(models))
        self.params = {k: v.detach().contiguous().requires_grad_(True) for k, v in params.items()}
        self.buffers = {k: v.detach().contiguous() for k, v in buffers.items()}
        self.base = copy.deepcopy(first).to("meta")
        self._enc_params = {k.removeprefix("encoder."): v for k, v in self.params.items() if k.startswith("encoder.")}
        self._enc_buffers = {k.removeprefix("encoder."): v for k, v in self.buffers.items() if k.startswith("encoder.")}
        self.training = True

    # -- modes and devices ----------------------------------------------------------------
    def train(self, mode: bool = True) -> "PackedSimulator":
        self.training = mode
        self.base.train(mode)
        return self

    def eval(self) -> "PackedSimulator":
        return self.train(False)

    @property
    def device(self) -> torch.device:
        return self.params["head.weight"].device

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    # -- the network ------------------------------------------------------------------------
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [K, B, C, H, W] -> h_0 [K, B, hidden] (as :meth:`Simulator.encode`)."""
        if images.dtype != torch.uint8:
            raise TypeError(f"images must be uint8 [K, B, C, H, W], got {images.dtype}")
        x = images.to(self.params["head.weight"].dtype).div_(127.5).sub_(1.0)
        # One dense convolution stack per member, channels_last on a GPU as the solo model's:
        # cuDNN's best kernels, and with the step captured as a CUDA graph no launch cost.
        # unbind's backward stacks the members' gradients in one copy (indexing member k would
        # add a full-size zero gradient per member).
        params = {k: v.unbind(0) for k, v in self._enc_params.items()}
        buffers = {k: v.unbind(0) for k, v in self._enc_buffers.items()}
        fmt = torch.channels_last if x.is_cuda else torch.contiguous_format
        emb = torch.stack([
            functional_call(self.base.encoder, ({k: v[j] for k, v in params.items()},
                                                {k: v[j] for k, v in buffers.items()}),
                            (x[j].contiguous(memory_format=fmt),))
            for j in range(self.size)])  # (K, B, E)
        if "to_h0.weight" in self.params:
            emb = torch.baddbmm(self.params["to_h0.bias"].unsqueeze(1), emb,
                                self.params["to_h0.weight"].transpose(1, 2))
        return emb

    @property
    def batched(self) -> bool:
        """The LSTM and the head as batched products over the members (on a GPU: one kernel per
        entry for all members), or one solo call per member (on a CPU: oneDNN's LSTM and the
        solo model's own operations, so a member is bit for bit its solo trial)."""
        return self.device.type == "cuda"

    def _gate_table(self) -> torch.Tensor:
        """token embedding @ W_ih^T + both biases: [K, c + 1, 4H], the input gates of each
        previous class (the solo sampler's table, in its order of operations)."""
        p = self.params
        return torch.bmm(p["token.weight"], p["lstm.weight_ih_l0"].transpose(1, 2)) \
            + p["lstm.bias_ih_l0"].unsqueeze(1) + p["lstm.bias_hh_l0"].unsqueeze(1)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """h [K, R, H] -> logits [K, R, c]."""
        w, b = self.params["head.weight"], self.params["head.bias"]
        if self.batched:
            return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        return torch.stack([F.linear(h[k], w[k], b[k]) for k in range(self.size)])

    def step_gates(self, table: torch.Tensor, prev: torch.Tensor, h: torch.Tensor,
                   w_hh_t: torch.Tensor) -> torch.Tensor:
        """One sampling step's gates: table [K, c + 1, 4H], previous classes [K, R], h [K, R, H],
        W_hh^T [K, H, 4H] -> [K, R, 4H] (the solo sampler's gather and ``addmm_`` per member on a CPU)."""
        if self.batched:
            member = torch.arange(self.size, device=prev.device).view(-1, 1)
            return torch.baddbmm(table[member, prev], h, w_hh_t)
        return torch.stack([torch.index_select(table[k], 0, prev[k]).addmm_(h[k], w_hh_t[k])
                            for k in range(self.size)])

    def forward(self, images: torch.Tensor, sequences: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits: images uint8 [K, B, C, H, W], sequences long [K, B, L] -> [K, B, L, c]."""
        K, B, L = sequences.shape
        start = torch.full((K, B, 1), self.start_token, dtype=torch.long, device=sequences.device)
        inputs = torch.cat([start, sequences[:, :, :-1]], dim=2)  # (K, B, L)
        h = self.encode(images)  # (K, B, H)
        p = self.params
        if not self.batched:  # the solo model's nn.LSTM call, member by member
            out = torch.stack([
                torch.lstm(F.embedding(inputs[k], p["token.weight"][k]),
                           (h[k].unsqueeze(0), torch.zeros_like(h[k]).unsqueeze(0)),
                           [p["lstm.weight_ih_l0"][k], p["lstm.weight_hh_l0"][k], p["lstm.bias_ih_l0"][k],
                            p["lstm.bias_hh_l0"][k]], True, 1, 0.0, self.training, False, True)[0]
                for k in range(K)])  # (K, B, L, H)
            return self._head(out.reshape(K, B * L, -1)).view(K, B, L, -1)
        table = self._gate_table()  # (K, c + 1, 4H)
        # Every entry's input gates as one product with the one-hot inputs, time-major (K, L, B, 4H):
        # its backward is a product too, where an indexed gather's would scatter-add B x L rows
        # into c + 1.
        onehot = F.one_hot(inputs.transpose(1, 2), table.shape[1]).to(table.dtype)  # (K, L, B, c + 1)
        # unbind: one view per entry whose backward stacks the entries' gradients once (gx[:, i]
        # would add a full-size gradient of gx per entry: L^2 memory traffic).
        gx = torch.bmm(onehot.view(K, L * B, -1), table).view(K, L, B, -1).unbind(1)
        w_hh = p["lstm.weight_hh_l0"].transpose(1, 2)  # (K, H, 4H)
        if torch.is_autocast_enabled(h.device.type):  # cast once here, not at every entry
            w_hh = w_hh.to(torch.get_autocast_dtype(h.device.type))
        cell = torch.zeros_like(h)
        outs = []
        for i in range(L):
            h, cell = _lstm_cell(torch.baddbmm(gx[i], h, w_hh), cell)
            outs.append(h)
        out = torch.stack(outs, dim=2)  # (K, B, L, H)
        return self._head(out.reshape(K, B * L, -1)).view(K, B, L, -1)

    __call__ = forward


def _lstm_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step from its gates (PyTorch's order i, f, g, o); the cell state in fp32 at least
    (bf16 gates under autocast are widened)."""
    dtype = torch.promote_types(gates.dtype, torch.float32)
    gi, gf, gg, go = gates.to(dtype).chunk(4, dim=-1)
    cell = torch.sigmoid(gf) * cell.to(dtype) + torch.sigmoid(gi) * torch.tanh(gg)
    return torch.sigmoid(go) * torch.tanh(cell), cell


# -- members in and out ----------------------------------------------------------------------
def member_state_dict(packed: PackedSimulator, k: int) -> dict[str, torch.Tensor]:
    """Member k as a :class:`Simulator` state dict (detached copies)."""
    out = {name: t[k].detach().clone() for name, t in packed.params.items()}
    out.update({name: t[k].detach().clone() for name, t in packed.buffers.items()})
    return out


def load_member(packed: PackedSimulator, k: int, state: dict[str, torch.Tensor]) -> None:
    """Overwrite member k with a :class:`Simulator` state dict (a checkpoint's ``model``)."""
    with torch.no_grad():
        for name, t in (*packed.params.items(), *packed.buffers.items()):
            t[k].copy_(state[name])


def member_model(packed: PackedSimulator, k: int, template: Simulator) -> Simulator:
    """Member k as a solo :class:`Simulator` (a copy of ``template`` with its weights)."""
    model = copy.deepcopy(template)
    model.load_state_dict(member_state_dict(packed, k))
    return model.train(packed.training)


def member_optimizer_state(optimizer: torch.optim.Adam, packed: PackedSimulator, k: int) -> dict:
    """Member k's part of the packed Adam as a solo Adam's ``state_dict`` (its parameters in
    the order of ``Simulator.parameters()``, which is the stacked dicts' order)."""
    full = optimizer.state_dict()
    state = {}
    for i, p in enumerate(packed.parameters()):
        s = optimizer.state.get(p)
        if s:
            state[i] = {key: (v.detach().clone() if key == "step" else v[k].detach().clone()) for key, v in s.items()}
    # A capturable pack's learning rate is a tensor; a solo Adam takes a number.
    groups = [{**g, "lr": float(g["lr"])} for g in full["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_member_optimizer(optimizer: torch.optim.Adam, packed: PackedSimulator, k: int, solo_state: dict) -> None:
    """Member k's Adam state from a solo Adam ``state_dict`` (a checkpoint's ``optimizer``).

    Adam's step counter is one per pack: members that resume together must have trained the
    same number of steps (a pack resumes from one epoch).
    """
    params = packed.parameters()
    for i, s in solo_state["state"].items():
        p = params[int(i)]
        slot = optimizer.state[p]
        if not slot:
            # A capturable Adam (the CUDA graph's) keeps its step counter on the parameters' device.
            capturable = optimizer.param_groups[0].get("capturable", False)
            step = s["step"].detach().clone().float().to(p.device if capturable else "cpu")
            slot.update(step=step, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        elif float(slot["step"]) != float(s["step"]):
            raise ValueError(f"member {k} resumes at Adam step {float(s['step'])}, "
                             f"the pack is at {float(slot['step'])}")
        with torch.no_grad():
            slot["exp_avg"][k].copy_(s["exp_avg"])
            slot["exp_avg_sq"][k].copy_(s["exp_avg_sq"])


# -- training ----------------------------------------------------------------------------------
@dataclass
class Member:
    """What one member trains on: its lambda schedule [L], batch-order generator and dataset
    (an index into the pack's datasets). ``failed`` holds the NonFiniteLoss message once its
    loss turned NaN or infinite."""

    lambdas: torch.Tensor
    generator: torch.Generator
    dataset: int = 0
    failed: str | None = None


class PackTrainer:
    """Epochs of a pack: :func:`~focus_tune.sim.train.train_one_epoch` of every member in one program.

    Every member draws its own order of its dataset from its own generator (``datasets``: one
    split for the members of one search, or one each for replication; one size). The losses
    stay on the device until the epoch ends: no synchronisation per batch. A member whose loss
    turns NaN or infinite is marked failed (``Member.failed``, the solo trial's message) and
    takes no further steps that count; its numbers are its own, so the others go on.

    ``cuda_graph`` (CUDA only): the whole step (gather, forward, backward, Adam) is captured
    once as a CUDA graph and replayed for every full batch, which removes the launch overhead
    of the LSTM's per-entry kernels; the first three batches run eagerly on a side stream (the
    warm-up capture needs), the last partial batch eagerly. It needs Adam with
    ``capturable=True`` (:func:`new_pack`). The numbers are those of the eager step.
    """

    def __init__(self, packed: PackedSimulator, optimizer: torch.optim.Optimizer, datasets: Sequence[DeviceSplit],
                 members: Sequence[Member], batch_size: int, autocast: bool = False, cuda_graph: bool = False,
                 lr: LearningRate | None = None):
        if len(members) != packed.size:
            raise ValueError(f"{len(members)} members for a pack of {packed.size}")
        if any(not 0 <= m.dataset < len(datasets) for m in members):
            raise ValueError(f"a member's dataset is outside the pack's {len(datasets)}")
        sizes = {len(d) for d in datasets}
        if len(sizes) != 1:
            raise ValueError(f"the members' datasets differ in size {sorted(sizes)}; a pack steps through equal ones")
        self.n = sizes.pop()
        self.packed, self.optimizer, self.members = packed, optimizer, list(members)
        self.batch_size, self.autocast, self.lr = batch_size, autocast, lr
        device = packed.device
        self.cuda_graph = cuda_graph and device.type == "cuda"
        K = packed.size
        self.images = torch.stack([d.images for d in datasets])  # (D, n, C, H, W)
        self.seqs = torch.stack([d.sequences for d in datasets])
        # Right-censored data: each dataset's observed entries (all of them for a dataset
        # without a mask); None when no dataset has one, the fully observed path.
        self.observed = stacked_observed(datasets)
        self.which = torch.tensor([m.dataset for m in members], device=device).view(K, 1)
        self.lambdas = torch.stack([m.lambdas.float() for m in members]).to(device)  # (K, L)
        # Device-side accumulators of an epoch (static tensors: a captured graph writes them).
        self.alive = torch.ones(K, dtype=torch.bool, device=device)
        self.total = torch.zeros(K, dtype=torch.float64, device=device)
        self.bad_at = torch.full((K,), -1, dtype=torch.long, device=device)
        self.bad_loss = torch.zeros(K, dtype=torch.float64, device=device)
        self.seen = torch.zeros((), dtype=torch.long, device=device)
        self.idx = torch.zeros(K, batch_size, dtype=torch.long, device=device)
        self.graph = None
        self.eager_steps = 0

    def _step(self, idx: torch.Tensor) -> None:
        x, y = self.images[self.which, idx], self.seqs[self.which, idx]
        observed = None if self.observed is None else self.observed[self.which, idx]  # (K, B, L)
        device = self.packed.device
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=self.autocast,
                            cache_enabled=not self.cuda_graph):
            logits = self.packed(x, y)
        loss = regularized_loss(logits, y, self.lambdas, observed)  # (K,): eq. 2 per member
        finite = torch.isfinite(loss)
        first = (self.bad_at < 0) & ~finite & self.alive
        self.bad_at.copy_(torch.where(first, self.seen, self.bad_at))
        self.bad_loss.copy_(torch.where(first, loss.detach().double(), self.bad_loss))
        ok = self.alive & (self.bad_at < 0)
        # Eager steps free the gradients; once a graph holds them (its static tensors), zero them in place.
        self.optimizer.zero_grad(set_to_none=self.graph is None)
        torch.where(ok, loss, torch.zeros_like(loss)).sum().backward()
        self.optimizer.step()
        self.total.add_(torch.where(ok, loss.detach().double(), 0.0) * idx.shape[1])
        self.seen.add_(idx.shape[1])

    def _capture(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step(self.idx)
        self.graph = graph

    def epoch(self, number: int = 1) -> list[dict]:
        """Pass ``number`` (from 1: the learning rate's steps) of every member over its data.
        Returns one dict per member, ``{"train/loss", "train/samples_per_s"}`` (per member: the
        pack's aggregate is K times it), or ``{"failed": message}`` once its loss has turned non-finite."""
        packed, members, b = self.packed, self.members, self.batch_size
        packed.train()
        device = packed.device
        order = torch.stack([torch.randperm(self.n, generator=m.generator) for m in members]).to(device)  # (K, n)
        self.alive.copy_(torch.tensor([m.failed is None for m in members], device=device))
        self.total.zero_()
        self.bad_at.fill_(-1)
        self.seen.zero_()
        t0 = time.perf_counter()
        step = (number - 1) * math.ceil(self.n / b)
        for start in range(0, self.n, b):
            if self.lr is not None:  # before the step (a captured graph reads a tensor lr, filled in place)
                set_lr(self.optimizer, self.lr(step))
            step += 1
            idx = order[:, start : start + b]
            if not self.cuda_graph or idx.shape[1] != b:
                self._step(idx)
            elif self.graph is None and self.eager_steps < 3:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._step(idx)
                torch.cuda.current_stream().wait_stream(side)
                self.eager_steps += 1
            else:
                if self.graph is None:
                    self._capture()  # records the step without running it
                self.idx.copy_(idx)
                self.graph.replay()
        seen = int(self.seen)
        rate = seen / (time.perf_counter() - t0)
        results = []
        for m, at, bl, tot in zip(members, self.bad_at.tolist(), self.bad_loss.tolist(), (self.total / seen).tolist()):
            if m.failed is None and at >= 0:
                m.failed = f"training loss became {bl} after {at} samples"
            results.append({"failed": m.failed} if m.failed else {"train/loss": tot, "train/samples_per_s": rate})
        return results


def new_pack(models: Sequence[Simulator], lr: float, device="cpu",
             capturable: bool = False) -> tuple[PackedSimulator, torch.optim.Adam]:
    """A pack of ``models`` on ``device`` and its Adam (no weight decay, as a solo trial's;
    ``capturable`` for :class:`PackTrainer`'s CUDA graph)."""
    packed = PackedSimulator([m.to(device) for m in models])
    # A captured step reads the learning rate from a tensor, so a schedule can change it between replays.
    rate = torch.tensor(lr, dtype=torch.float32, device=device) if capturable else lr
    return packed, torch.optim.Adam(packed.parameters(), lr=rate, capturable=capturable)
