"""Packed trials on one GPU: solo vs packed training and Monte Carlo validation, one JSON.

Prints and writes (``--out DIR``/gpu_packed.json), with the device's name:

1. ``train``: training samples/s of one trial per process (``focus_tune.sim.train.train_one_epoch``,
   what a trial runs today) against a pack of K members (``focus_tune.sim.packed.PackTrainer``,
   each member its own seed, lambda schedule and batch order) with the whole step as a CUDA
   graph, fp32 and bf16, at the paper size (3x84x84, L = 300, ResNet-18,
   LSTM(256), batch 256; K = 4, 16, 32 up to the memory) and the quick size (3x32x32, L = 100,
   ResNet-18 width 32, LSTM(128), batch 64; K = 16, 64), with peak GPU memory; the ratio is
   the pack's aggregate samples/s over the faster solo precision's.
2. ``mc``: Monte Carlo validation (M = 100, every entry drawn from the model) at the paper
   size: solo ``focus_tune.scoring.evaluation.evaluate`` and ``focus_tune.scoring.packed_eval.evaluate_packed`` on
   the same probe items (the two results must agree: ``same_metrics``), then the packed
   evaluation of the whole H.E.R.O. paper validation split (16,769 items, L = 300), with where
   its time goes (sampling, counting, metrics), and a pack of 4 on a quarter of it.
3. ``profile``: where the GPU time of a pack's step goes (paper size, K = 16, eager, bf16).

    python benchmarks/gpu_packed.py --out DIR     # on a GPU: about 4 minutes
    python benchmarks/gpu_packed.py --dry         # on a CPU, tiny sizes: checks it runs
    python benchmarks/gpu_packed.py --from-json docs/results/gpu/packed-h200.json   # the search's cost

Each measurement runs a warm-up epoch (cuDNN autotuning, the allocator, the graph capture)
before the timed one. A section that fails records its error in the JSON and the others go on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from focus_tune.scoring.evaluation import evaluate  # noqa: E402
from focus_tune.scoring.packed_eval import evaluate_packed  # noqa: E402
from focus_tune.sim.adam_patch import eager_optimizers  # noqa: E402
from focus_tune.sim.device_split import DeviceSplit  # noqa: E402
from focus_tune.sim.model import Simulator  # noqa: E402
from focus_tune.sim.packed import Member, PackTrainer, new_pack  # noqa: E402
from focus_tune.sim.regularization import LambdaSchedule  # noqa: E402
from focus_tune.sim.train import train_one_epoch  # noqa: E402


@dataclass(frozen=True)
class Size:
    """One model and data size (search_spaces/hero.yaml's quick and paper profiles)."""

    name: str
    image: tuple[int, int, int]
    length: int
    classes: int
    width: int
    hidden: int
    batch: int
    lr: float


QUICK = Size("quick 3x32x32 L=100", (3, 32, 32), 100, 19, 32, 128, 64, 1e-3)
PAPER = Size("paper 3x84x84 L=300", (3, 84, 84), 300, 19, 64, 256, 256, 5e-5)
DRY = Size("dry 3x32x32 L=12", (3, 32, 32), 12, 5, 8, 16, 8, 1e-3)
PAPER_VAL_ITEMS = 16_769  # the H.E.R.O. paper validation split


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _split(n: int, size: Size, device, seed: int = 0) -> DeviceSplit:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, *size.image), dtype=torch.uint8, generator=g)
    sequences = torch.randint(0, size.classes, (n, size.length), generator=g)
    return DeviceSplit(images.to(device), sequences.to(device), torch.randint(1, size.length + 1, (n,), generator=g))


def _model(size: Size, seed: int, device) -> Simulator:
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it trains: 64 ResNet-18s in a moment
        model = Simulator(size.classes, encoder="resnet18", embed_dim=size.hidden, hidden=size.hidden,
                          encoder_width=size.width)
    return model.to(memory_format=torch.channels_last) if device.type == "cuda" else model


def _schedule(k: int, size: Size) -> torch.Tensor:
    """A different staged schedule per member (the search's candidates differ so)."""
    lam = (0.001, 0.005, 0.01, 0.05)
    return LambdaSchedule.staged([lam[k % 4], lam[(k // 4) % 4]], lam[k % 3], min(11, size.length),
                                 size.length).tensor()


def _peak(device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def _reset(device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def solo_rate(size: Size, device, batches: int, bf16: bool) -> dict:
    """One trial per process: the trainable's ``train_one_epoch``."""
    _reset(device)
    model = _model(size, 0, device)
    opt = torch.optim.Adam(model.parameters(), lr=size.lr)
    data = _split(size.batch * batches, size, device)
    gen = torch.Generator().manual_seed(0)
    train_one_epoch(model, opt, data, _schedule(0, size), size.batch, gen, autocast=bf16)  # warm-up
    _sync(device)
    t0 = time.perf_counter()
    out = train_one_epoch(model, opt, data, _schedule(0, size), size.batch, gen, autocast=bf16)
    _sync(device)
    return {"samples_per_s": len(data) / (time.perf_counter() - t0), "loss": out["train/loss"],
            "peak_gib": _peak(device)}


def packed_rate(size: Size, device, k: int, batches: int, bf16: bool, graph: bool) -> dict:
    _reset(device)
    packed, opt = new_pack([_model(size, s, device) for s in range(k)], size.lr, device, capturable=graph)
    data = _split(size.batch * batches, size, device)
    members = [Member(_schedule(j, size), torch.Generator().manual_seed(j)) for j in range(k)]
    trainer = PackTrainer(packed, opt, [data], members, size.batch, autocast=bf16, cuda_graph=graph)
    trainer.epoch()  # warm-up (and the capture)
    _sync(device)
    t0 = time.perf_counter()
    out = trainer.epoch()
    _sync(device)
    elapsed = time.perf_counter() - t0
    failed = [m.failed for m in members if m.failed]
    return {"k": k, "samples_per_s": k * len(data) / elapsed, "step_s": elapsed / batches,
            "loss_mean": sum(o.get("train/loss", float("nan")) for o in out) / k, "failed": len(failed),
            "peak_gib": _peak(device)}


def train_section(plan, device, batches, report: dict, out: Path | None, deadline: float) -> None:
    """``plan``: (size, ks, modes, precisions), modes: with a CUDA graph or not; rows go into
    ``report["train"]`` (written after each, so a run cut short keeps what it measured)."""
    rows = report.setdefault("train", [])
    graphs_ok = device.type == "cuda"
    for size, ks, modes, precisions in plan:
        best_solo = 0.0
        for prec in precisions:
            solo = solo_rate(size, device, batches[size.name], prec == "bf16")
            best_solo = max(best_solo, solo["samples_per_s"])
            rows.append({"size": size.name, "precision": prec, "mode": "solo", "k": 1, **solo})
            print(f"  {size.name:<22} {prec} solo                {solo['samples_per_s']:10.0f} samples/s", flush=True)
        for prec in precisions:
            for graph in modes:
                graph = graph and graphs_ok
                mode = "packed+graph" if graph else "packed"
                for k in ks:
                    if time.perf_counter() > deadline:
                        rows.append({"size": size.name, "precision": prec, "mode": mode, "k": k, "skipped": "time"})
                        continue
                    try:
                        r = packed_rate(size, device, k, batches[size.name], prec == "bf16", graph)
                    except Exception as err:  # noqa: BLE001 - out of memory, or a capture that fails: record, go on
                        oom = isinstance(err, torch.cuda.OutOfMemoryError)
                        rows.append({"size": size.name, "precision": prec, "mode": mode, "k": k,
                                     "oom" if oom else "error": traceback.format_exc(limit=4)})
                        print(f"  {size.name:<22} {prec} {mode:<13} K={k:<3} "
                              f"{'out of memory' if oom else traceback.format_exc(limit=4)}", flush=True)
                        _reset(device)
                        break
                    r["ratio_to_best_solo"] = r["samples_per_s"] / best_solo
                    rows.append({"size": size.name, "precision": prec, "mode": mode, **r})
                    print(f"  {size.name:<22} {prec} {mode:<13} K={k:<3} {r['samples_per_s']:10.0f} samples/s "
                          f"({r['ratio_to_best_solo']:5.1f}x the best solo), step {r['step_s'] * 1e3:7.1f} ms, peak "
                          f"{r['peak_gib'] or 0:5.1f} GiB, failed {r['failed']}", flush=True)
                    _write(out, report)


def profile_section(size: Size, device, k: int, bf16: bool) -> dict:
    """Where a pack's step spends the GPU's time: torch.profiler over two eager steps, the
    kernels with the most device time (the table goes into the JSON as text)."""
    from torch.profiler import ProfilerActivity, profile

    _reset(device)
    packed, opt = new_pack([_model(size, s, device) for s in range(k)], size.lr, device)
    data = _split(size.batch * 2, size, device)
    members = [Member(_schedule(j, size), torch.Generator().manual_seed(j)) for j in range(k)]
    trainer = PackTrainer(packed, opt, [data], members, size.batch, autocast=bf16)
    trainer.epoch()
    _sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        trainer.epoch()
        _sync(device)
    wall = time.perf_counter() - t0
    averages = prof.key_averages()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = averages.table(sort_by=key, row_limit=25)
    from torch.autograd import DeviceType

    # The kernels' own entries only: an operator's entry counts its kernels' time again.
    device_us = sum(e.self_device_time_total for e in averages if e.device_type == DeviceType.CUDA)
    print(f"  {size.name} K={k} {'bf16' if bf16 else 'fp32'}: two steps {wall:.2f} s wall, "
          f"{device_us / 1e6:.2f} s of kernels", flush=True)
    print(table, flush=True)
    return {"size": size.name, "k": k, "bf16": bf16, "wall_s": wall,
            "device_s": device_us / 1e6, "table": table}


def mc_section(size: Size, device, items: int, probe: int) -> dict:
    event = size.classes - 1
    models = [_model(size, s, device) for s in range(4)]
    out: dict = {"size": size.name, "num_samples": 100, "items": items, "probe_items": probe}

    def timed(fn):
        _sync(device)
        t0 = time.perf_counter()
        r = fn()
        _sync(device)
        return r, time.perf_counter() - t0

    data = _split(probe, size, device, seed=1)
    evaluate(models[0], _split(8, size, device, seed=2), 100, event, torch.Generator().manual_seed(0))  # warm-up
    solo, out["solo_probe_s"] = timed(lambda: evaluate(models[0], data, 100, event, torch.Generator().manual_seed(0)))
    packed, _ = new_pack(models[:1], size.lr, device)
    packed_res, out["packed_probe_s"] = timed(lambda: evaluate_packed(packed, [data], 100, event,
                                                                     [torch.Generator().manual_seed(0)])[0])
    diffs = {k: abs(solo[k] - packed_res[k]) for k in solo if isinstance(solo[k], float)}
    out["max_metric_difference"] = max((d for d in diffs.values() if d == d), default=0.0)
    out["same_metrics"] = out["max_metric_difference"] < 1e-6
    out["probe_speedup"] = out["solo_probe_s"] / out["packed_probe_s"]
    print(f"  probe {probe} items: solo evaluate {out['solo_probe_s']:.2f} s, packed {out['packed_probe_s']:.2f} s "
          f"({out['probe_speedup']:.1f}x), largest metric difference {out['max_metric_difference']:.2e}", flush=True)
    data = None  # the probe split's memory back before the full one (the lambdas above read data)

    full = _split(items, size, device, seed=3)
    _, out["packed_full_s"] = timed(lambda: evaluate_packed(packed, [full], 100, event,
                                                            [torch.Generator().manual_seed(0)]))
    # Where it goes: the sampler alone, then the rest (counts, p_stay, metrics).
    from focus_tune.scoring.packed_eval import sample_packed

    _, out["sampler_full_s"] = timed(lambda: sample_packed(packed, full.images.unsqueeze(0), 100, size.length,
                                                            [torch.Generator().manual_seed(0)]))
    print(f"  packed evaluate of {items} items x L={size.length}: {out['packed_full_s']:.2f} s "
          f"(the sampler alone {out['sampler_full_s']:.2f} s)", flush=True)
    full = None  # its memory back before the quarters (the lambdas above read full)
    quarter = _split(max(1, items // 4), size, device, seed=4)
    pack4, _ = new_pack(models, size.lr, device)
    _, out["packed4_quarter_s"] = timed(lambda: evaluate_packed(pack4, [quarter] * 4, 100, event,
                                                               [torch.Generator().manual_seed(j) for j in range(4)]))
    print(f"  pack of 4, {len(quarter)} items each: {out['packed4_quarter_s']:.2f} s", flush=True)
    out["peak_gib"] = _peak(device)
    return out


def paper_cost(report: dict) -> list[dict]:
    """The paper H.E.R.O. search on 8 GPUs with packs of K trainings per GPU, from a run's rates.

    A pack of K occupies one GPU for its members' whole training: 200 epochs of K x the
    training items at the pack's measured aggregate rate (bf16, CUDA graph), plus a validation
    every ``eval_every`` epochs of each member in turn (the packed evaluation's measured
    seconds per item and entry: packing does not shorten it, see ``mc``). The cost model
    (``focus_tune.procedure.cost.estimate``) then runs the search's rounds with K members per GPU
    (``gpus_per_trial = 1/K``), which assumes a round's members start together.
    """
    from focus_tune.config.space import load_search_config
    from focus_tune.data.builtin.profiles import get_spec
    from focus_tune.procedure.cost import Resources, estimate
    from focus_tune.procedure.plan import SearchPlan

    cfg = load_search_config(REPO / "search_spaces" / "hero.yaml", "paper")
    spec = get_spec("hero", "paper")
    plan = SearchPlan(cfg.grid, length=spec.length, seed=0, final_seeds=cfg.final_seeds)
    mc = report["mc"]
    val_s = mc["packed_full_s"] / (mc["items"] * PAPER.length) * spec.val * spec.length  # one member's validation
    evaluations = -(-cfg.train.epochs // cfg.train.eval_every)
    rows = []
    for r in report["train"]:
        if (r["size"] != PAPER.name or r["precision"] != "bf16" or r["mode"] != "packed+graph"
                or "samples_per_s" not in r):
            continue
        k = r["k"]
        minutes = (cfg.train.epochs * spec.train * k / r["samples_per_s"] + evaluations * k * val_s) / 60
        cost = estimate(plan, Resources(2, 1 / k, 8), minutes, epochs=cfg.train.epochs)
        rows.append({"k": k, "minutes_per_pack": minutes, "gpu_hours_per_training": minutes / 60 / k,
                     "wall_hours_8_gpus": cost.wall_minutes / 60, "gpu_hours_busy_8_gpus": cost.gpu_hours_busy,
                     "gpu_hours_billed_8_gpus": cost.gpu_hours_billed})
        print(f"  packs of {k:2d}: {minutes:6.0f} min per pack ({minutes / 60 / k:4.2f} GPU-hours per training); the "
              f"search on 8 GPUs: {cost.wall_minutes / 60:5.1f} h wall, {cost.gpu_hours_busy:5.1f} GPU-hours busy, "
              f"{cost.gpu_hours_billed:5.1f} billed", flush=True)
    return rows


def pack_rates(report: dict, command: str, measured: str = "") -> dict:
    """What the search reads (``focus_tune/procedure/gpu_pack_rates.json``): per data shape, the packs'
    aggregate bf16 samples/s and peak GPU memory at each measured K (CUDA graph), and the
    packed validation's seconds per item and entry."""
    sizes: dict = {}
    for r in report["train"]:
        if r.get("mode") != "packed+graph" or r.get("precision") != "bf16" or "samples_per_s" not in r:
            continue
        size = next(s for s in (QUICK, PAPER) if s.name == r["size"])
        c, h, w = size.image
        shape = sizes.setdefault(f"{c}x{h}x{w} L={size.length}", {"batch_size": size.batch, "packs": {}})
        shape["packs"][str(r["k"])] = {"samples_per_s": r["samples_per_s"], "peak_gib": r["peak_gib"]}
    mc = report["mc"]
    return {"device": report["device"],
            "device_memory_gib": report.get("device_memory_gib") or DEVICE_MEMORY_GIB.get(report["device"]),
            "measured": report.get("measured") or measured, "command": command, "precision": "bf16", "sizes": sizes,
            "val_s_per_item_entry": mc["packed_full_s"] / (mc["items"] * PAPER.length)}


# nvidia-smi's memory.total of the cards lent here (143771 and 81559 MiB), for a run's JSON that lacks it
DEVICE_MEMORY_GIB = {"NVIDIA H200": 140.4, "NVIDIA H100 80GB HBM3": 79.6}


def main() -> int:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="folder for gpu_packed.json")
    parser.add_argument("--dry", action="store_true", help="tiny sizes on the CPU: checks that it runs")
    parser.add_argument("--sections", default="mc,train,profile", help="in this order")
    parser.add_argument("--ks", default="4,16,32,64",
                        help="pack sizes (the paper size takes those <= 32, the quick size those >= 16)")
    parser.add_argument("--budget-s", type=float, default=1e9,
                        help="skip the training measurements that would start after this many seconds")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="only cost the paper H.E.R.O. search on 8 GPUs from a run's gpu_packed.json")
    parser.add_argument("--rates-out", type=Path, default=None,
                        help="with --from-json: also write the pack rates the search reads "
                             "(focus_tune/procedure/gpu_pack_rates.json)")
    parser.add_argument("--measured", default="", help="with --rates-out: the run's date, where its JSON lacks it")
    args = parser.parse_args()
    if args.from_json is not None:
        report = json.loads(args.from_json.read_text())
        print(f"The paper H.E.R.O. search on 8 GPUs from {args.from_json}:")
        paper_cost(report)
        if args.rates_out is not None:
            rates = pack_rates(report, "python benchmarks/gpu_packed.py --out OUT --budget-s 190", args.measured)
            args.rates_out.write_text(json.dumps(rates, indent=2) + "\n")
            print(f"pack rates: {args.rates_out}")
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    report: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "measured": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                    "device_memory_gib": (torch.cuda.get_device_properties(device).total_memory / 2**30
                                          if device.type == "cuda" else None),
                    "dry": args.dry, "errors": {}, "section_s": {}}
    ks = [int(k) for k in args.ks.split(",")]
    print(f"device: {report['device']}, torch {report['torch']}", flush=True)
    sections = args.sections.split(",")
    start = time.perf_counter()
    for name in sections:
        t0 = time.perf_counter()
        try:
            if name == "mc":
                print("Monte Carlo validation at the paper size", flush=True)
                report["mc"] = mc_section(DRY if args.dry else PAPER, device, 24 if args.dry else PAPER_VAL_ITEMS,
                                          8 if args.dry else 1024)
            elif name == "train":
                print("Training, solo vs packed", flush=True)
                if args.dry:
                    plan = [(DRY, [2, 3], [False], ("fp32",))]
                    batches = {DRY.name: 2}
                else:
                    modes = [True]
                    plan = [(PAPER, [k for k in ks if k <= 32], modes, ("fp32", "bf16")),
                            (QUICK, [k for k in ks if k >= 16], modes, ("fp32", "bf16"))]
                    batches = {QUICK.name: 8, PAPER.name: 6}
                train_section(plan, device, batches, report, args.out, start + args.budget_s)
            elif name == "profile":
                print("Profile of a pack's step", flush=True)
                size, k = (DRY, 2) if args.dry else (PAPER, 16)
                report["profile"] = profile_section(size, device, k, bf16=not args.dry)
            else:
                raise ValueError(f"unknown section {name!r}")
        except Exception:  # noqa: BLE001 - record and go on to the next section
            report["errors"][name] = traceback.format_exc()
            print(report["errors"][name], flush=True)
        report["section_s"][name] = time.perf_counter() - t0
        _write(args.out, report)
    return 1 if report["errors"] else 0


def _write(out: Path | None, report: dict) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_packed.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
