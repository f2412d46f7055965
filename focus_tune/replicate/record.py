"""The replication in MLflow: one run (tag ``kind`` = ``replication``) in the scenario's
experiment (``focus-tune/<scenario>``, beside its searches, or the one --experiment names), whose
artifacts are the replication's table and figure and each search's report, and which names the
R search runs it summarizes (tags ``search.seed<r>``: their tracking URI and parent run id).

The same command run again (resumed, or with more searches) updates the same run: it is
found by its ``replication_key`` tag (storage folder, scenario, profile). Its pooled paired
differences are metrics at step R, the number of searches they pool.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from ..tracking.backend import create_local_store, tracking_uri, ui_command
from ..tracking.lineage import context_tags
from .analysis import PAIRS, PRIMARY

KIND = "replication"


def _slug(key: str) -> str:
    return key.split("/")[-1]


def _row_slug(row: str) -> str:
    """A row's name as MLflow takes it in a metric's name (no '+'): "none +conformal" -> "none-conformal"."""
    return row.replace(" +", "-")


def description(scenario: str, profile: str, summary: dict, storage: Path) -> str:
    lines = [f"**Replication of the {scenario} ({profile}) search**: {summary['runs']} searches, seeds "
             f"{', '.join(map(str, summary['seeds']))}; each draws its own dataset, weights and Monte Carlo noise.", "",
             "- Artifacts: `replication.md` (schedules chosen, decision agreement, family wins, pooled paired "
             "differences with 95 % intervals and Holm), `replication.png` (the paired differences run by run), "
             "`replication.json`, and `searches/seed<r>/` (each search's results.md and search.png).",
             "- Metrics `replication/<a>-minus-<b>/<metric>/{mean,low,high}`: the pooled paired differences of "
             "the primary endpoints at step R (the searches pooled).",
             f"- Each search logged to its own store (tags `search.seed<r>`: URI and parent run id); open one with "
             f"`mlflow ui --backend-store-uri <URI>`. Run folders: `{storage}`."]
    if summary.get("regime"):
        lines.append("- Tag `regime_kept`: the searches that kept the scenario's regime (replication.md says what "
                     "the others missed).")
    if summary.get("missing_seeds"):
        lines.append(f"- Not finished yet: seeds {', '.join(map(str, summary['missing_seeds']))} (the same "
                     "command resumes them).")
    return "\n".join(lines)


def record(uri: str | None, scenario: str, profile: str, storage: Path, out: Path, summary: dict,
           status: str, name: str | None = None, experiment: str | None = None) -> tuple[str, str]:
    """Log (or update) the replication's run, named ``name`` (default ``replication-<scenario>-<profile>``)
    in ``experiment`` (default ``focus-tune/<scenario>``); returns (run id, how to open its experiment in the UI)."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(uri)
    create_local_store(uri)
    client = MlflowClient(uri)
    experiment = experiment if experiment is not None else f"focus-tune/{scenario}"
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    key = f"{storage.resolve()}|{scenario}|{profile}" + (f"|{name}" if name is not None else "")
    found = client.search_runs([exp_id], filter_string=f"tags.kind = '{KIND}'", max_results=1000)
    found = [r for r in found if r.data.tags.get("replication_key") == key]
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
    else:
        run_id = client.create_run(exp_id, run_name=name if name is not None else f"replication-{scenario}-{profile}",
                                   tags={**context_tags(), "kind": KIND, "replication_key": key}).info.run_id
    tags = {"scenario": scenario, "profile": profile, "runs": str(summary["runs"]),
            "seeds": ",".join(map(str, summary["seeds"])), "storage": str(storage.resolve()),
            "mlflow.note.content": description(scenario, profile, summary, storage.resolve())}
    if summary.get("regime"):
        tags["regime_kept"] = f"{summary['regime']['kept']}/{summary['runs']}"
    for r in summary["search_runs"]:
        tags[f"search.seed{r['seed']}"] = f"{r['tracking_uri']} {r['run_id']}"
    R = summary["runs"]
    metrics = []
    for a, b in PAIRS:
        for k in PRIMARY:
            d = summary["differences"].get(f"{a} - {b}/{k}")
            for stat in ("mean", "low", "high"):
                if d is not None and d[stat] is not None and math.isfinite(d[stat]):
                    metrics.append((f"replication/{_row_slug(a)}-minus-{_row_slug(b)}/{_slug(k)}/{stat}", d[stat]))
    if metrics and not any(m.step == R for m in client.get_metric_history(run_id, metrics[0][0])):
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, R) for k, v in metrics])
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    for f in ("replication.md", "replication.json", "replication.png"):
        if (out / f).exists():
            client.log_artifact(run_id, str(out / f))
    for folder in summary["folders"]:
        folder = Path(folder)
        seed = folder.name.rsplit("seed", 1)[-1]
        for f in ("results.md", "search.png"):
            if (folder / "report" / f).exists():
                client.log_artifact(run_id, str(folder / "report" / f), artifact_path=f"searches/seed{seed}")
    client.set_terminated(run_id, status=status)
    return run_id, ui_command(uri, exp_id)
