"""GPU check: what the GPU path costs at the paper's sizes, in one run of a few minutes.

Prints, with the device's name:

1. training samples/s of the paper profile's simulator (ResNet-18 -> LSTM(256), batch 256)
   at the paper's sizes (3x84x84 frames with L = 300 and L = 200, FaceMed 3x64x64 with
   L = 100), fp32 and bf16 autocast, with the peak GPU memory of each;
2. Monte Carlo validation time (M = 100) for the H.E.R.O. paper validation split
   (16,769 items, L = 300) through ``focus_tune.scoring.evaluation.evaluate``, the function every
   validation of every trial calls;
3. aggregate samples/s with 1, 2, 4 and 8 trials sharing the GPU through Ray Tune at
   fractional GPUs (the real trainable, ``focus_tune.search.trainable.run_trial``, a few epochs
   each on 84x84 frames with L = 300), and GPU memory per trial;
4. from those numbers, the minutes of one paper-profile H.E.R.O. training at each GPU
   fraction, the best ``--gpus-per-trial`` and the cost model's estimate of the search on 8 GPUs
   (focus_tune.procedure.cost);
5. a smoke search with ``--gpus-per-trial 0.25`` end to end.

The measured rates are written to ``gpu_rates.json`` (``--out``) and to ``--rates-out PATH``:
the file the dry run reads, ``focus_tune/procedure/gpu_rates.json`` (one NVIDIA H200) unless it is given
``--rates PATH`` (or ``$FOCUS_TUNE_GPU_RATES``), which prices a search on your own card:

    python benchmarks/gpu_check.py [--out DIR]        # on a GPU: about 5 minutes
    python benchmarks/gpu_check.py --rates-out my_gpu_rates.json
    python -m focus_tune.search --game hero --profile paper --dry-run --cluster-gpus 8 \
        --gpus-per-trial 0.5 --rates my_gpu_rates.json
    python benchmarks/gpu_check.py --dry              # on a CPU, tiny sizes: checks it runs

``--dry`` runs every section with tiny sizes on the CPU (the Ray Tune section without GPUs and
in the rates' precision alone, the search as ``--dry-run``) so the script cannot rot; its
numbers mean nothing. Where bf16 autocast of the model does not run on the device (a CPU
without bf16 kernels: oneDNN has no bf16 LSTM there), every section skips bf16 and says why,
in the output and in the JSON (``skipped``); the rates are then fp32's.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from focus_tune.config.space import load_search_config  # noqa: E402
from focus_tune.data.builtin.profiles import get_spec  # noqa: E402
from focus_tune.scoring.evaluation import evaluate  # noqa: E402
from focus_tune.sim.adam_patch import eager_optimizers  # noqa: E402
from focus_tune.sim.device_split import DeviceSplit  # noqa: E402
from focus_tune.sim.model import Simulator  # noqa: E402
from focus_tune.sim.regularization import LambdaSchedule  # noqa: E402
from focus_tune.sim.train import train_one_epoch  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One training shape: the paper's data sizes of a scenario."""

    name: str
    image: tuple[int, int, int]
    length: int
    classes: int


PAPER_CASES = [
    Case("3x84x84 L=300", (3, 84, 84), 300, 19),  # H.E.R.O., River Raid, Bank Heist, Road Runner
    Case("3x84x84 L=200", (3, 84, 84), 200, 19),  # Seaquest
    Case("3x64x64 L=100", (3, 64, 64), 100, 3),  # FaceMed
]
DRY_CASES = [Case("3x32x32 L=12", (3, 32, 32), 12, 5)]


def paper_train(dry: bool) -> dict:
    """The paper profile's training settings (search_spaces/hero.yaml), shrunk for --dry."""
    train = load_search_config(REPO / "search_spaces" / "hero.yaml", "paper").to_dict()["train"]
    if dry:
        train.update(batch_size=8, num_samples=4, embed_dim=32, hidden=32, encoder_width=8)
    return train


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _random_split(n: int, case: Case, device: torch.device, seed: int = 0) -> DeviceSplit:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, *case.image), dtype=torch.uint8, generator=g)
    sequences = torch.randint(0, case.classes, (n, case.length), generator=g)
    return DeviceSplit(images.to(device), sequences.to(device), torch.randint(1, case.length + 1, (n,), generator=g))


def _model(case: Case, device: torch.device, dry: bool) -> Simulator:
    from focus_tune.config.space import TrainConfig
    from focus_tune.sim.model_io import DataInfo, build_model

    torch.manual_seed(0)
    info = DataInfo(num_classes=case.classes, event=case.classes - 1, condition_class=0, in_channels=case.image[0])
    model = build_model(TrainConfig(**paper_train(dry)), info).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # as the trainable does
    return model


def bf16_unsupported(device: torch.device) -> str | None:
    """Why bf16 autocast cannot train the model on ``device``, or None where it can: one
    training step (forward and backward) of the real model at the dry sizes. On a CPU without
    AVX-512, for one, oneDNN has no bf16 LSTM primitive."""
    case = DRY_CASES[0]
    model = _model(case, device, dry=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5)
    lambdas = LambdaSchedule.staged([0.01], 0.005, min(21, case.length), case.length).tensor()
    try:
        train_one_epoch(model, opt, _random_split(8, case, device), lambdas, 8, torch.Generator().manual_seed(0),
                        autocast=True)
    except RuntimeError as err:
        return f"bf16 autocast of the model fails on {device.type}: {str(err).splitlines()[0]}"
    return None


# -- 1. training throughput ---------------------------------------------------------------

def train_throughput(cases: list[Case], device: torch.device, batch: int, batches: int, dry: bool,
                     precisions=("fp32", "bf16")) -> list[dict]:
    rows = []
    for case in cases:
        for precision in precisions:
            model = _model(case, device, dry)
            opt = torch.optim.Adam(model.parameters(), lr=1e-5)
            lambdas = LambdaSchedule.staged([0.01, 0.005, 0.005], 0.005, min(21, case.length), case.length).tensor()
            gen = torch.Generator().manual_seed(0)
            data = _random_split(batch * batches, case, device)
            warm = DeviceSplit(data.images[: 2 * batch], data.sequences[: 2 * batch], data.time_to_event[: 2 * batch])
            bf16 = precision == "bf16"
            train_one_epoch(model, opt, warm, lambdas, batch, gen, autocast=bf16)  # cuDNN autotune, allocator
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            _sync(device)
            t0 = time.perf_counter()
            train_one_epoch(model, opt, data, lambdas, batch, gen, autocast=bf16)
            _sync(device)
            sps = len(data) / (time.perf_counter() - t0)
            mem = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            rows.append({"case": case.name, "precision": precision, "batch": batch, "samples_per_s": sps,
                         "peak_mem_gib": mem})
            mem_s = f"peak {mem:5.1f} GiB" if mem is not None else "no GPU memory"
            print(f"  {case.name:<16} {precision}: {sps:8.1f} samples/s, {mem_s}", flush=True)
            del model, opt, data, warm
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


# -- 2. Monte Carlo validation --------------------------------------------------------------

def mc_validation(case: Case, device: torch.device, items: int, probe: int, budget_s: float, dry: bool) -> dict:
    """Time ``evaluate`` (M = 100, every entry drawn from the model: the default) on a probe
    subset, then on the whole split if the probe predicts it fits ``budget_s``."""
    model = _model(case, device, dry)
    event = case.classes - 1

    def timed(n: int, event_sampling: str = "model") -> float:
        data = _random_split(n, case, device, seed=1)
        _sync(device)
        t0 = time.perf_counter()
        evaluate(model, data, 100, event, torch.Generator().manual_seed(0), event_sampling=event_sampling)
        _sync(device)
        return time.perf_counter() - t0

    timed(min(probe, 64))  # warm-up
    probe_s = timed(probe)
    per_item = probe_s / probe
    out = {"case": case.name, "num_samples": 100, "probe_items": probe, "probe_s": probe_s,
           "items": items, "s_per_item_entry": per_item / case.length}
    if per_item * items <= budget_s:
        full = timed(items)
        out.update(full_s=full, s_per_item_entry=full / items / case.length, extrapolated=False)
    else:
        out.update(full_s=per_item * items, extrapolated=True)
    out["forced_probe_s"] = timed(probe, event_sampling="forced")
    # Where the probe's time goes: the sampler alone, at the trainable's chunk and a larger one.
    from focus_tune.scoring.evaluation import draw_samples

    images = _random_split(probe, case, device, seed=1).images
    for chunk in (64, 512):
        _sync(device)
        t0 = time.perf_counter()
        draw_samples(model, images, 100, case.length, torch.Generator().manual_seed(0), forced_event=None, chunk=chunk)
        _sync(device)
        out[f"sampler_probe_s_chunk{chunk}"] = time.perf_counter() - t0
    how = "extrapolated from the probe" if out["extrapolated"] else "measured"
    print(f"  evaluate(), M=100, {items} items x L={case.length}: {out['full_s']:.1f} s ({how}); "
          f"probe of {probe}: {probe_s:.2f} s with every entry drawn, {out['forced_probe_s']:.2f} s with END forced; "
          f"the sampler alone {out['sampler_probe_s_chunk64']:.2f} s (chunks of 64 images), "
          f"{out['sampler_probe_s_chunk512']:.2f} s (512)", flush=True)
    return out


# -- 3. trials sharing the GPU through Ray Tune ---------------------------------------------

class GpuMemoryPoller:
    """Peak GPU memory per process (nvidia-smi), sampled in a thread while trials run."""

    def __init__(self, period_s: float = 0.5):
        self.period_s, self.peak_mib, self._stop = period_s, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = subprocess.run(
                    ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            for line in text.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[1].isdigit():
                    self.peak_mib[parts[0]] = max(self.peak_mib.get(parts[0], 0), int(parts[1]))
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def tune_sharing(case: Case, counts: list[int], items: int, epochs: int, gpus: bool, dry: bool,
                 storage: Path, precisions=("bf16", "fp32")) -> list[dict]:
    """n trials at 1/n GPU each (one CPU each), all at once: aggregate and per-trial samples/s,
    for each training precision of the trainable (``train.precision``)."""
    from ray import tune
    from ray.tune import Callback

    from focus_tune.procedure.trials import TrialSpec

    class Rates(Callback):
        """Each trial's per-epoch training samples/s (Tune's file loggers are off)."""

        def __init__(self):
            self.sps: dict[str, list[float]] = {}

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if "train/samples_per_s" in result:
                self.sps.setdefault(trial.trial_id, []).append(result["train/samples_per_s"])

    from focus_tune.config.space import TrainConfig
    from focus_tune.procedure.job import Splits, TrialJob
    from focus_tune.search.trainable import run_trial
    from focus_tune.sim.model_io import DataInfo

    train = {**paper_train(dry), "epochs": epochs, "eval_every": epochs, "val_items": 8 if dry else 128}
    info = DataInfo(num_classes=case.classes, event=case.classes - 1, condition_class=0, in_channels=case.image[0])
    split = _random_split(items, case, torch.device("cpu"))  # what DeviceSplit.from_arrays reads, as a data split
    data = Splits(split, split, split)
    rows = []
    for precision, n in [(p, n) for p in precisions for n in counts]:
        jobs = []
        for i in range(n):
            spec = TrialSpec(trial_id=f"{precision}-share{n}-{i}", stage="stage1", family="time-dependent", seed=i,
                             params={},
                             schedule=LambdaSchedule.staged([0.005], 0.005, min(21, case.length), case.length))
            jobs.append(TrialJob(spec, TrainConfig(**{**train, "precision": precision}), info))
        resources = {"cpu": 1, "gpu": (1 / n) if gpus else 0}
        trainable = tune.with_resources(tune.with_parameters(run_trial, data=data), resources)
        collect = Rates()
        tuner = tune.Tuner(trainable, param_space={"job": tune.grid_search(jobs)},
                           run_config=tune.RunConfig(name=f"{precision}-share-{n}", storage_path=str(storage),
                                                     verbose=0, callbacks=[collect]))
        t0 = time.perf_counter()
        with GpuMemoryPoller() as mem:
            results = tuner.fit()
        wall = time.perf_counter() - t0
        errors = [r.error for r in results if r.error]
        if errors:
            raise RuntimeError(f"{n} trials sharing the GPU: {errors[0]}")
        # The first epoch warms up (cuDNN autotuning, allocator): the median of the others.
        per_trial = [statistics.median(sps[1:] if len(sps) > 1 else sps) for sps in collect.sps.values()]
        if len(per_trial) != n:
            raise RuntimeError(f"{n} trials sharing the GPU: {len(per_trial)} reported a training epoch")
        mem_mib = sorted(mem.peak_mib.values())
        row = {"precision": precision, "trials": n, "gpu_per_trial": 1 / n, "aggregate_samples_per_s": sum(per_trial),
               "per_trial_samples_per_s": statistics.mean(per_trial), "wall_s": wall,
               "samples_per_wall_s": n * items * epochs / wall,  # process start and validation included
               "gpu_mem_per_trial_mib": max(mem_mib) if mem_mib else None}
        rows.append(row)
        mem_s = f"{row['gpu_mem_per_trial_mib']} MiB per trial" if mem_mib else "GPU memory not read"
        print(f"  {precision} {n} trial(s) at {1 / n:.3g} GPU: "
              f"{row['aggregate_samples_per_s']:8.1f} samples/s together, "
              f"{row['per_trial_samples_per_s']:8.1f} each, {mem_s}, wall {wall:.0f} s", flush=True)
    return rows


# -- 4. the smoke search end to end ---------------------------------------------------------

def smoke_search(workdir: Path, dry: bool) -> dict:
    cmd = [sys.executable, "-m", "focus_tune.search", "--game", "hero", "--profile", "smoke",
           "--gpus-per-trial", "0.25"]
    if dry:  # no GPU: the plan and its cost only, so the flags cannot rot
        cmd += ["--dry-run", "--cluster-gpus", "1", "--trial-minutes", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        env.pop(var, None)  # the search makes its own local Ray
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
    print(f"  {' '.join(cmd[1:])}: exit {proc.returncode}, {wall:.0f} s", flush=True)
    for line in tail:
        print(f"    | {line}")
    if proc.returncode != 0:
        raise RuntimeError(f"the smoke search failed with exit code {proc.returncode}")
    return {"command": " ".join(cmd[1:]), "wall_s": wall, "returncode": proc.returncode}


# -- what the numbers mean for the paper profile --------------------------------------------

def rates_precision(report: dict) -> str:
    """The precision of the rates: the trainable's default, or fp32 where that was skipped."""
    precision = _default_precision()
    return "fp32" if precision in report.get("skipped", {}) else precision


def rates(report: dict, precision: str) -> dict:
    """The rates the dry run needs, for one training precision: samples/s of one trial alone
    on the GPU per case (section 1), the per-trial slow-down at each GPU fraction (section 3,
    84x84 L = 300, applied to every case) and the Monte Carlo validation seconds per
    item-entry (section 2, alone on the GPU)."""
    single = {r["case"]: r["samples_per_s"] for r in report["train"] if r["precision"] == precision}
    share = [r for r in report["tune"] if r["precision"] == precision]
    base = next(r["per_trial_samples_per_s"] for r in share if r["trials"] == 1)
    return {
        "device": report["device"],
        "measured": report.get("date", time.strftime("%Y-%m-%d")),
        "command": "python benchmarks/gpu_check.py",
        "precision": precision,
        "batch_size": report["train"][0]["batch"],
        "num_samples": report["mc"]["num_samples"],
        "train_samples_per_s_alone": single,
        "sharing_slowdown": {f"{r['gpu_per_trial']:.4g}": base / r["per_trial_samples_per_s"] for r in share},
        "val_s_per_item_entry": report["mc"]["s_per_item_entry"],
    }


def main() -> int:
    eager_optimizers()  # a process that trains: Adam without the torch._dynamo import (focus_tune/sim/adam_patch.py)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="tiny sizes on the CPU: checks that every section runs")
    ap.add_argument("--out", type=Path, default=None, help="folder for gpu_check.json and gpu_rates.json")
    ap.add_argument("--rates-out", type=Path, default=None, metavar="PATH",
                    help="also write the rates here: the file the search's --dry-run --rates PATH reads")
    ap.add_argument("--sections", default="train,mc,tune,search")
    ap.add_argument("--mc-budget-s", type=float, default=120.0,
                    help="run the whole validation split only if the probe predicts at most this")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="no measuring: the rates and the paper cost from a saved gpu_check.json")
    args = ap.parse_args()
    if args.from_json is not None:
        report = json.loads(args.from_json.read_text())
        report["rates"] = rates(report, rates_precision(report))
        _write(args.out, "gpu_rates.json", report["rates"])
        _write_rates(args.rates_out, report["rates"])
        print(f"rates of {report['device']} ({report['rates']['precision']}) from {args.from_json}")
        paper_cost(report["rates"], report["dry"])
        return 0
    sections = set(args.sections.split(","))
    dry = args.dry
    if not dry and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on a GPU, or with --dry on a CPU")
    device = torch.device("cpu" if dry else "cuda")
    name = "CPU (dry run)" if dry else torch.cuda.get_device_name(device)
    torch.backends.cudnn.benchmark = True
    # Ray workers import focus_tune from this checkout; Tune keeps its banners to itself.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    # A local Ray that requires a fresh token, set before anything imports Ray (the search's
    # own subprocess in section 5 makes its own).
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    print(f"gpu_check on {name}; torch {torch.__version__}"
          + (f", CUDA {torch.version.cuda}, {torch.cuda.get_device_properties(device).total_memory / 2**30:.0f} GiB"
             if not dry else ""), flush=True)
    report: dict = {"device": name, "torch": torch.__version__, "dry": dry, "date": time.strftime("%Y-%m-%d"),
                    "errors": {}}
    t_start = time.perf_counter()
    cases = DRY_CASES if dry else PAPER_CASES
    if sections & {"train", "tune"} and (why := bf16_unsupported(device)):
        report["skipped"] = {"bf16": why}
        print(f"bf16 skipped in every section: {why}", flush=True)

    def usable(*precisions: str) -> tuple[str, ...]:
        return tuple(p for p in precisions if p not in report.get("skipped", {}))

    hero = cases[0]

    def section(key: str, title: str, fn) -> None:
        """Run one section; a failure is recorded and the others still run."""
        if key not in sections:
            return
        print(title, flush=True)
        t0 = time.perf_counter()
        try:
            report[key] = fn()
        except Exception as err:  # noqa: BLE001 - reported, and the exit code says it
            report["errors"][key] = f"{type(err).__name__}: {err}"
            print(f"  FAILED: {report['errors'][key]}", flush=True)
        report.setdefault("section_s", {})[key] = time.perf_counter() - t0
        _write(args.out, "gpu_check.json", report)

    section("train", "1. training, batch 256, ResNet-18 -> LSTM(256), channels_last",
            lambda: train_throughput(cases, device, batch=8 if dry else 256, batches=2 if dry else 24, dry=dry,
                                     precisions=usable("fp32", "bf16")))
    section("mc", "2. Monte Carlo validation (evaluate, M = 100)",
            lambda: mc_validation(hero, device, items=16 if dry else get_spec("hero", "paper").val,
                                  probe=8 if dry else 1024, budget_s=args.mc_budget_s, dry=dry))
    with tempfile.TemporaryDirectory() as tmp:
        section("tune", "3. trials sharing the GPU through Ray Tune (the real trainable)",
                lambda: _with_local_ray(dry, lambda: tune_sharing(
                    hero, [1, 2] if dry else [1, 2, 4, 8], items=16 if dry else 8192, epochs=2 if dry else 3,
                    gpus=not dry, dry=dry, storage=Path(tmp),
                    # dry: the rates' precision alone (the train section runs both through the
                    # model; here Tune runs the same trainable, and 12 s of actors is saved)
                    precisions=(rates_precision(report),) if dry else usable("bf16", "fp32"))))
        if all(k in report for k in ("train", "mc", "tune")):
            report["rates"] = rates(report, rates_precision(report))
            _write(args.out, "gpu_rates.json", report["rates"])
            _write_rates(args.rates_out, report["rates"])
            sections.add("paper")
            section("paper", "4. the paper H.E.R.O. profile from these rates",
                    lambda: paper_cost(report["rates"], dry))
        section("search", "5. smoke search, --gpus-per-trial 0.25", lambda: smoke_search(Path(tmp), dry))
    report["total_s"] = time.perf_counter() - t_start
    _write(args.out, "gpu_check.json", report)
    print(f"gpu_check done in {report['total_s']:.0f} s on {name}"
          + (f"; skipped: {', '.join(report['skipped'])}" if report.get("skipped") else "")
          + (f"; FAILED sections: {', '.join(report['errors'])}" if report["errors"] else ""))
    return 1 if report["errors"] else 0


def _default_precision() -> str:
    """The precision a trial trains in unless its search space says otherwise."""
    from focus_tune.config.space import TrainConfig

    return TrainConfig.__dataclass_fields__["precision"].default


def _write(out: Path | None, name: str, obj: dict) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(obj, indent=2, default=float) + "\n")


def _write_rates(path: Path | None, rates: dict) -> None:
    """The rates file of ``--rates-out``, and the dry run that reads it."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rates, indent=2, default=float) + "\n")
        print(f"rates of {rates['device']} written to {path}: python -m focus_tune.search ... --dry-run "
              f"--cluster-gpus N --rates {path}", flush=True)


def _with_local_ray(dry: bool, fn):
    """``fn()`` inside a local Ray that requires the token main() made, as the search does."""
    import ray

    ray.init(num_cpus=2 if dry else min(16, os.cpu_count() or 1), num_gpus=0 if dry else 1,
             include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             object_store_memory=2**28 if dry else 4 * 2**30)
    try:
        return fn()
    finally:
        ray.shutdown()


def paper_cost(r: dict, dry: bool) -> dict:
    """Minutes of one paper H.E.R.O. training per GPU fraction and the 8-GPU search cost."""
    from focus_tune.procedure.cost import Resources, estimate
    from focus_tune.procedure.plan import SearchPlan
    from focus_tune.procedure.rates import training_minutes_from_rates

    cfg = load_search_config(REPO / "search_spaces" / "hero.yaml", "paper")
    spec = get_spec("hero", "paper")
    if dry:  # the rates are of the tiny dry case: cost a dataset of that shape
        spec = spec.__class__(**{**asdict(spec), "image_shape": DRY_CASES[0].image, "length": DRY_CASES[0].length})
    print(f"  {cfg.train.epochs} epochs, validation every {cfg.train.eval_every}, "
          f"{spec.train} training and {spec.val} validation items")
    plan = SearchPlan(cfg.grid, length=spec.length, seed=0, final_seeds=cfg.final_seeds)
    rows = []
    for fraction in sorted((float(k) for k in r["sharing_slowdown"]), reverse=True):
        minutes = training_minutes_from_rates(r, spec, cfg, fraction)
        cost = estimate(plan, Resources(2, fraction, 8), minutes, epochs=cfg.train.epochs)
        rows.append({"gpus_per_trial": fraction, "minutes_per_training": minutes,
                     "gpu_hours_per_training": minutes / 60 * fraction, "wall_hours_8_gpus": cost.wall_minutes / 60,
                     "gpu_hours_busy_8_gpus": cost.gpu_hours_busy, "gpu_hours_billed_8_gpus": cost.gpu_hours_billed})
        print(f"  {fraction:5.3g} GPU per trial: {minutes:5.0f} min per training "
              f"({minutes / 60 * fraction:4.2f} GPU-hours); "
              f"the search on 8 GPUs: {cost.wall_minutes / 60:5.1f} h wall, "
              f"{cost.gpu_hours_busy:5.1f} GPU-hours busy, {cost.gpu_hours_billed:5.1f} billed")
    best = min(rows, key=lambda row: row["wall_hours_8_gpus"])
    fraction = best["gpus_per_trial"]
    print(f"  best --gpus-per-trial on 8 GPUs: {fraction:.3g} (shortest wall time, so the fewest GPU-hours billed)")
    return {"per_fraction": rows, "best_gpus_per_trial": fraction}


if __name__ == "__main__":
    sys.exit(main())
