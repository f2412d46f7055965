"""Monte Carlo sampling: the fast sampler against the naive reference.

H.E.R.O.-like case: 19 classes (END = 18), L = 300, M = 100, hidden 256, an END hazard set
so that sequences last ~44 entries on average. The naive reference steps an LSTMCell over
every row for all L entries and draws with torch.multinomial. The fast sampler runs twice:
with END forced to repeat (rows that drew it are dropped) and without (every row is drawn
to the end from the model: the evaluation default, `absorbing: model`).

`--step` times the sampler's LSTM step alone, side by side at the quick size (64 images x
M = 100 rows, hidden 128, 1 thread): the gates in PyTorch's order, five elementwise passes
over strided quarters; the order i, f, o, g with one in-place sigmoid and one in-place tanh
(the sampler before); and the sigmoid-only cell (``model.sampler_cell``, the sampler now),
and prints how far each one's state is from PyTorch's order.

    python benchmarks/bench_sampling.py [--images 64] [--threads 2]
    python benchmarks/bench_sampling.py --step [--rows 6400] [--hidden 128]
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from focus_tune.sim.model import Simulator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' naive references
from _reference import naive_sample  # noqa: E402

END = 18


def hero_like_model(hidden: int, mean_length: float) -> Simulator:
    torch.manual_seed(0)
    sim = Simulator(19, encoder="resnet18", embed_dim=hidden, hidden=hidden).eval()
    with torch.no_grad():
        # Near-uniform actions with a constant END hazard of 1 / (mean_length + 1) per entry.
        sim.head.weight.mul_(0.05)
        sim.head.bias.zero_()
        hazard = 1.0 / (mean_length + 1.0)
        sim.head.bias[END] = torch.log(torch.tensor(hazard * 18 / (1 - hazard)))
    return sim


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _tanh_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's cell before the sigmoid-only one: gates i, f, o, g; an in-place sigmoid
    over the first three quarters and an in-place tanh over the fourth, then tanh(c)."""
    H = cell.shape[-1]
    sig = gates[..., : 3 * H].sigmoid_()
    g = gates[..., 3 * H :].tanh_()
    cell = sig[..., H : 2 * H] * cell + sig[..., :H] * g
    return sig[..., 2 * H :] * torch.tanh(cell), cell


def step_benchmark(rows: int, hidden: int, classes: int = 19, steps: int = 30) -> None:
    """The sampler's LSTM step three ways, interleaved, best of 5: PyTorch's gate order, the
    reordered gates with a tanh (the sampler before), the sigmoid-only cell (the sampler now)."""
    from focus_tune.sim.model import sampler_cell, sampler_weights

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(hidden, hidden, batch_first=True)
    token = torch.randn(classes + 1, hidden)
    w_hh = lstm.weight_hh_l0.detach()
    table_old = token @ lstm.weight_ih_l0.detach().T + lstm.bias_ih_l0.detach() + lstm.bias_hh_l0.detach()
    table_new, w_hh_t = (t.detach() for t in sampler_weights(token, lstm.weight_ih_l0, lstm.weight_hh_l0,
                                                                  lstm.bias_ih_l0, lstm.bias_hh_l0))
    H = hidden
    unscale = torch.ones(4 * H)
    unscale[3 * H :] = 0.5  # the tanh cell's weights: the g rows as PyTorch has them
    table_tanh, w_tanh = table_new * unscale, w_hh_t * unscale
    h0, c0 = torch.randn(rows, hidden) * 0.5, torch.randn(rows, hidden) * 0.5
    prev = torch.randint(0, classes + 1, (rows,))

    def old():
        h, cell = h0, c0
        for _ in range(steps):
            gates = torch.addmm(table_old[prev], h, w_hh.T)
            gi, gf, gg, go = gates.chunk(4, dim=1)
            cell = torch.sigmoid(gf) * cell + torch.sigmoid(gi) * torch.tanh(gg)
            h = torch.sigmoid(go) * torch.tanh(cell)
        return h, cell

    def run(table, w, cell_fn):
        def steps_():
            h, cell = h0, c0
            for _ in range(steps):
                h, cell = cell_fn(torch.index_select(table, 0, prev).addmm_(h, w), cell)
            return h, cell
        return steps_

    cells = {"old": old, "tanh": run(table_tanh, w_tanh, _tanh_cell), "now": run(table_new, w_hh_t, sampler_cell)}
    with torch.no_grad():
        best = {k: float("inf") for k in cells}
        for _ in range(5):
            for k, fn in cells.items():
                best[k] = min(best[k], timed(fn, 1)[0])
        states = {k: fn() for k, fn in cells.items()}
    diff = {k: max((states["old"][0] - h).abs().max().item(), (states["old"][1] - c).abs().max().item())
            for k, (h, c) in states.items()}
    ms = {k: v / steps * 1000 for k, v in best.items()}
    print(f"sampler LSTM step, {rows} rows, hidden {hidden}, {torch.get_num_threads()} thread(s), {steps} steps:")
    print(f"  PyTorch gate order, five strided passes:          {ms['old']:7.2f} ms/step")
    print(f"  i, f, o, g, in-place sigmoid and tanh (before):    {ms['tanh']:7.2f} ms/step")
    print(f"  i, f, o, 2g, sigmoids only (now):                  {ms['now']:7.2f} ms/step")
    print(f"  ratio before / now: {ms['tanh'] / ms['now']:.2f}x (PyTorch order / now: {ms['old'] / ms['now']:.2f}x)")
    print(f"  largest difference of the states from PyTorch's order after {steps} steps: "
          f"before {diff['tanh']:.1e}, now {diff['now']:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", action="store_true", help="time the LSTM step alone, old and new")
    ap.add_argument("--rows", type=int, default=6400, help="with --step: rows sampled at once (64 images x M = 100)")
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--hidden", type=int, help="LSTM width (default 256; 128, the quick model's, with --step)")
    ap.add_argument("--size", type=int, default=84, help="image side in pixels")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.step:
        step_benchmark(args.rows, args.hidden or 128)
        return
    args.hidden = args.hidden or 256

    sim = hero_like_model(args.hidden, mean_length=44)
    x = torch.randint(0, 256, (args.images, 3, args.size, args.size), dtype=torch.uint8)
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731

    t_fast, s = timed(lambda: sim.sample(x, args.samples, args.length, generator=gen(), forced_event=END), args.repeats)
    t_model, _ = timed(lambda: sim.sample(x, args.samples, args.length, generator=gen()), args.repeats)
    t_naive, _ = timed(lambda: naive_sample(sim, x, args.samples, args.length, generator=gen(), method="multinomial"),
                       1)
    mean_len = (s != END).sum(-1).float().mean().item()
    print(f"case: {args.images} images x M={args.samples} x L={args.length}, hidden {args.hidden}, "
          f"19 classes, {args.size}x{args.size} input, {args.threads} threads; mean entries before END {mean_len:.1f}")
    print(f"naive (LSTMCell over all rows, multinomial): {t_naive:8.2f} s")
    print(f"fast  (gate table, absorbing rows dropped):  {t_fast:8.2f} s")
    print(f"fast  (gate table, every row to the end):    {t_model:8.2f} s")
    print(f"speed-up: {t_naive / t_fast:.1f}x; fast sampler {t_fast / args.images * 64:.2f} s per 64 images")
    print(f"no forcing costs {t_model / t_fast:.1f}x the forced sampler "
          f"(and is {t_naive / t_model:.1f}x faster than naive)")


if __name__ == "__main__":
    main()
