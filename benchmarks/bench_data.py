"""Build time, size and load time of the default datasets, per game and profile.

Builds each (game, profile) into a temporary root, then times `load_dataset` plus decoding
all three splits, and prints one Markdown row per dataset (the table in docs/DATA.md).
`--faces PNG` also draws the grid of procedural FaceMed faces shown in docs/DATA.md and
`--age-probe` measures how readable age is from the faces.

    python benchmarks/bench_data.py [--profiles smoke quick] [--games facemed hero ...]
                                    [--faces docs/img/facemed_faces.png] [--age-probe] [--keep DIR]
"""

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from focus_tune.data import BUILTIN_SCENARIOS, PROFILES, build_dataset, get_spec, load_dataset


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir()) / 1e6


def bench(game: str, profile: str, root: Path) -> str:
    spec = get_spec(game, profile)
    start = time.perf_counter()
    path = build_dataset(game, profile, root / f"{game}-{profile}")
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    ds = load_dataset(path)
    splits = [ds.train, ds.val, ds.test]
    load_s = time.perf_counter() - start
    m = ds.manifest
    mean_t = np.mean(splits[0].time_to_event)
    unit = "y" if game == "facemed" else f" ({mean_t * m.sampling_freq / 60:.2f} s)"
    row = (f"| {game} | {profile} | {spec.train}/{spec.val}/{spec.test} | {'x'.join(map(str, spec.image_shape))} "
           f"| {spec.length} | {spec.sampling_freq} | {mean_t:.1f}{unit} | {build_s:.1f} | {load_s:.1f} "
           f"| {folder_mb(path):.1f} |")
    del ds, splits
    return row


def faces_grid(out: Path, size: int = 64, seed: int = 0) -> None:
    """24 procedural faces (2 per age, 2 to 95 years), each titled with its true age."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from focus_tune.data.builtin.faces import render_faces

    ages = np.repeat([2, 5, 12, 25, 30, 38, 45, 50, 62, 75, 88, 95], 2)
    images = render_faces(ages, size, np.random.default_rng(seed))
    fig, axes = plt.subplots(3, 8, figsize=(12, 5.2))
    for ax, image, age in zip(axes.ravel(), images, ages):
        ax.imshow(image.transpose(1, 2, 0))
        ax.set_title(f"age {age}", fontsize=10)
        ax.axis("off")
    fig.suptitle(f"Procedural FaceMed faces ({size}x{size}, seed {seed})")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)


def age_probe(n_train: int = 2500, n_test: int = 500, seed: int = 0) -> str:
    """How readable age is from 32x32 procedural faces: a ridge probe on 16x16 pixels."""
    from focus_tune.data.builtin.facemed import sample_ages
    from focus_tune.data.builtin.faces import apparent_age, render_faces

    rng = np.random.default_rng(seed)
    n = n_train + n_test
    ages = sample_ages(n, rng)
    images = render_faces(ages, 32, rng)
    x = np.hstack([images.reshape(n, 3, 16, 2, 16, 2).mean(axis=(3, 5)).reshape(n, -1) / 255, np.ones((n, 1))])
    w = np.linalg.solve(x[:n_train].T @ x[:n_train] + np.eye(x.shape[1]), x[:n_train].T @ ages[:n_train])
    error = x[n_train:] @ w - ages[n_train:]
    floor = np.abs(apparent_age(ages, np.random.default_rng(seed + 1)) - ages).mean()
    return (f"age probe (ridge on 16x16 pixels, {n_train} train / {n_test} test faces): "
            f"R^2 {1 - (error ** 2).mean() / ages[n_train:].var():.2f}, MAE {np.abs(error).mean():.1f} years; "
            f"apparent-age noise alone: MAE {floor:.1f} years")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profiles", nargs="+", default=["smoke", "quick"], choices=PROFILES)
    ap.add_argument("--games", nargs="+", default=list(BUILTIN_SCENARIOS), choices=BUILTIN_SCENARIOS)
    ap.add_argument("--faces", type=Path, help="also write the face grid PNG here")
    ap.add_argument("--keep", type=Path, help="build into this folder and keep the datasets")
    ap.add_argument("--age-probe", action="store_true", help="also measure how readable age is from the faces")
    args = ap.parse_args()

    if args.faces:
        faces_grid(args.faces)
        print(f"wrote {args.faces}")
    if args.age_probe:
        print(age_probe())
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_data_"))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    print("| game | profile | train/val/test | C x H x W | L | freq | mean T (train) | build s | load s | MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for profile in args.profiles:
            for game in args.games:
                print(bench(game, profile, root), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
