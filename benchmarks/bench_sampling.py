"""Monte Carlo sampling: the fast sampler against the naive reference.

H.E.R.O.-like case: 19 classes (END = 18), L = 300, M = 100, hidden 256, an END hazard set
so that sequences last ~44 entries on average. The naive reference steps an LSTMCell over
every row for all L entries and draws with torch.multinomial. The fast sampler runs twice:
with END forced to repeat (rows that drew it are dropped) and without (every row is drawn
to the end from the model: the evaluation default, `absorbing: model`).

    python benchmarks/bench_sampling.py [--images 64] [--threads 2]
"""

import argparse
import time

import torch

from focus_tune.model import Simulator
from focus_tune.reference import naive_sample

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--size", type=int, default=84, help="image side in pixels")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    sim = hero_like_model(args.hidden, mean_length=44)
    x = torch.randint(0, 256, (args.images, 3, args.size, args.size), dtype=torch.uint8)
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731

    t_fast, s = timed(lambda: sim.sample(x, args.samples, args.length, generator=gen(), absorbing=END), args.repeats)
    t_model, _ = timed(lambda: sim.sample(x, args.samples, args.length, generator=gen()), args.repeats)
    t_naive, _ = timed(lambda: naive_sample(sim, x, args.samples, args.length, generator=gen(), method="multinomial"), 1)
    mean_len = (s != END).sum(-1).float().mean().item()
    print(f"case: {args.images} images x M={args.samples} x L={args.length}, hidden {args.hidden}, "
          f"19 classes, {args.size}x{args.size} input, {args.threads} threads; mean entries before END {mean_len:.1f}")
    print(f"naive (LSTMCell over all rows, multinomial): {t_naive:8.2f} s")
    print(f"fast  (gate table, absorbing rows dropped):  {t_fast:8.2f} s")
    print(f"fast  (gate table, every row to the end):    {t_model:8.2f} s")
    print(f"speed-up: {t_naive / t_fast:.1f}x; fast sampler {t_fast / args.images * 64:.2f} s per 64 images")
    print(f"no forcing costs {t_model / t_fast:.1f}x the forced sampler (and is {t_naive / t_model:.1f}x faster than naive)")


if __name__ == "__main__":
    main()
