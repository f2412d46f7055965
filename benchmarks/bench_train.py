"""Training throughput of the simulator on this machine's CPU (or a GPU with --device cuda).

ResNet-18 -> LSTM(256), batch 32, L = 300, 19 classes; samples per second over a few
batches after a warm-up, per input resolution.

    python benchmarks/bench_train.py [--sizes 84x84 210x160] [--threads 2]
"""

import argparse

import torch

from focus_tune.sim.adam_patch import eager_optimizers
from focus_tune.sim.device_split import DeviceSplit
from focus_tune.sim.model import Simulator
from focus_tune.sim.regularization import LambdaSchedule
from focus_tune.sim.train import train_one_epoch


def main() -> None:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["84x84", "210x160"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"ResNet-18 + LSTM(256), batch {args.batch}, L={args.length}, device {device}, {args.threads} threads")
    for size in args.sizes:
        h, w = (int(v) for v in size.split("x"))
        torch.manual_seed(0)
        model = Simulator(19, encoder="resnet18").to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-5)
        n = args.batch * args.batches
        data = DeviceSplit(
            images=torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, device=device),
            sequences=torch.randint(0, 19, (n, args.length), device=device),
            time_to_event=torch.zeros(n, dtype=torch.long),
        )
        lambdas = LambdaSchedule.staged([0.01, 0.005, 0.005], 0.005, 6, args.length).tensor()
        gen = torch.Generator().manual_seed(0)
        warm = DeviceSplit(data.images[: args.batch], data.sequences[: args.batch], data.time_to_event[: args.batch])
        train_one_epoch(model, opt, warm, lambdas, args.batch, gen, autocast=device.type == "cuda")
        stats = train_one_epoch(model, opt, data, lambdas, args.batch, gen, autocast=device.type == "cuda")
        print(f"3x{h}x{w}: {stats['train/samples_per_s']:.1f} samples/s")


if __name__ == "__main__":
    main()
