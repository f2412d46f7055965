#!/usr/bin/env python3
"""Real screenshots of the MLflow UI for a finished search, for the README's pictures.

    python scripts/mlflow_screenshots.py --store PATH/mlflow.db --experiment focus-tune/hero --out docs/img

Writes five PNG files into --out:

  mlflow_trials_table.png   the experiment's runs table (the link the search prints), the parent
                            run expanded so its trials show, with the stage, val/ece and winner_of
                            columns;
  mlflow_compare_stage.png  MLflow's compare page for one stage's trials: the parallel coordinates
                            plot of the parameters that vary between them against val/ece;
  mlflow_parent_report.png  the parent run's artifacts page showing report/results.md;
  mlflow_search_run.png     the parent run's overview (its headline metrics, tags, dataset input,
                            logged models);
  mlflow_logged_model.png   the time-dependent family's logged model (its metrics, source run).

How: the store is copied (sqlite3's online backup, so a search that is still running is not
disturbed and the store is never written), `mlflow ui` serves the copy on a free loopback port,
and headless Chromium is driven through the DevTools protocol over --remote-debugging-pipe (no
websocket library needed). Both are always stopped at the end, also on errors and Ctrl-C.

Needs only the standard library, mlflow (for MlflowClient and `mlflow ui`) and a Chromium on
PATH; on Debian/Ubuntu: `apt-get update && apt-get install -y chromium`.
Tested with MLflow 3.17 and Chromium 156.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

STAGES = ("stage1", "stage2", "stage3", "joint")  # the stages --stage picks from by default


class Fail(Exception):
    """An error worth one clear line; code 2 for bad inputs or setup, 1 when the UI misbehaves."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- processes

def stop(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """Stop a process started with start_new_session=True, and everything in its process group."""
    if proc is None or getattr(proc, "stopped", False):
        return
    proc.stopped = True
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    with contextlib.suppress(ProcessLookupError):  # children left behind by a leader that exited
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def last_line(path: str) -> str:
    with contextlib.suppress(OSError), open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
        return lines[-1] if lines else ""
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_ui(db: str, workdir: str, timeout: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or shutil.which("mlflow")
    if not mlflow:
        raise Fail("the `mlflow` command was not found (activate the project's venv)")
    log = os.path.join(workdir, "mlflow-ui.log")
    argv = [mlflow, "ui", "--backend-store-uri", f"sqlite:///{db}", "--workers", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no job runner: ~0.5 GiB
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise Fail(f"mlflow ui exited with code {proc.returncode}: {last_line(log)}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        return proc, base
            if time.monotonic() > deadline:
                raise Fail(f"mlflow ui did not answer {base}/health within {timeout:.0f}s: {last_line(log)}")
            time.sleep(0.5)
    except BaseException:  # also Ctrl-C while waiting: the caller never gets proc to stop it
        stop(proc)
        raise


# --------------------------------------------------------------------------- DevTools protocol

class CDP:
    """Chromium's DevTools protocol over --remote-debugging-pipe: Chromium reads JSON messages, each
    ended by a NUL byte, on its fd 3 and writes its answers and events the same way on its fd 4."""

    def __init__(self, chromium: str, profile_dir: str, log_path: str):
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        # the child's ends are moved to fds >= 10 first, so that the dup2s to 3 and 4 below
        # cannot overwrite one another
        child_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def fds_3_and_4():  # in the child, before exec; dup2's copies are inheritable
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        argv = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={profile_dir}", "--no-first-run", "--no-default-browser-check",
                "--hide-scrollbars", "--mute-audio", "--lang=en-US", "about:blank"]
        try:
            with open(log_path, "wb") as log:
                # close_fds=False: Python opens every fd close-on-exec, so only 0-4 reach Chromium
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             preexec_fn=fds_3_and_4, close_fds=False,
                                             start_new_session=True)
        finally:
            os.close(child_r)
            os.close(child_w)
        self.log_path = log_path
        self._buf = b""
        self._id = 0

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict:
        """Send one command and return its result; events read meanwhile are dropped (none is needed)."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise Fail(f"chromium: {method}: {reply['error'].get('message')}", 1)
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise Fail(f"chromium did not answer {method} within {timeout:.0f}s", 1)
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise Fail(f"chromium exited: {last_line(self.log_path)}", 1)
            self._buf += chunk

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send("Browser.close", timeout=5)
        stop(self.proc, grace=5)
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


# JS: the visible element whose whole text is `text` (inside `scope`, a CSS selector), innermost first
FIND_JS = """((text, scope) => {
  const hits = [...document.querySelectorAll(scope + ' *')].filter(e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && (e.innerText || e.textContent || '').trim() === text;
  });
  return hits.find(e => !hits.some(o => o !== e && e.contains(o))) || null;
})"""

# hides MLflow's floating assistant button, which would cover the bottom right corner of each page
HIDE_CSS = '[data-assistant-ui="true"] { display: none !important; }'


class Page:
    """One browser tab, attached with flatten: true so commands carry its sessionId."""

    def __init__(self, cdp: CDP, width: int, height: int, timeout: float):
        self.cdp, self.timeout = cdp, timeout
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def send(self, method: str, params: dict | None = None) -> dict:
        return self.cdp.send(method, params, self.session)

    def js(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            details = r["exceptionDetails"]
            raise Fail(f"page script failed: {details.get('exception', {}).get('description', details)}", 1)
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def wait_for(self, expression: str, what: str, timeout: float | None = None):
        """Poll a JS expression until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            with contextlib.suppress(Fail):  # the page may be between two documents
                value = self.js(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                raise Fail(f"timed out waiting for {what} on {self.js('location.href')}", 1)
            time.sleep(0.25)

    def wait_for_text(self, text: str, timeout: float | None = None) -> None:
        self.wait_for(f"document.body && document.body.innerText.includes({json.dumps(text)})",
                      f"the text {text!r}", timeout)

    def settle(self, quiet: float = 1.0) -> None:
        """Wait until no spinner or skeleton shows and the page's text has stopped changing."""
        busy = ("document.querySelectorAll('[class*=\"skeleton\"], [class*=\"-spin-spinning\"], "
                "[role=\"progressbar\"], [aria-busy=\"true\"]').length")
        self.wait_for(f"{busy} === 0", "the page to finish loading")
        before, since = None, time.monotonic()
        deadline = since + self.timeout
        while time.monotonic() < deadline:
            now = self.js("document.body.innerText.length + ':' + document.images.length")
            if now != before:
                before, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
            time.sleep(0.2)
        self.js("document.fonts.ready.then(() => true)")

    def click_at(self, x: float, y: float) -> None:
        """A real mouse click (press and release), then the mouse moves away so no hover shows."""
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent",
                      {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 0, "y": 0})

    def center(self, element_js: str, what: str) -> tuple[float, float]:
        """Scroll the element that `element_js` evaluates to into view; return its center."""
        box = self.wait_for(f"""(() => {{ const e = {element_js}; if (!e) return null;
            e.scrollIntoView({{block: 'center', inline: 'center'}});
            const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""",
                            what)
        return box[0], box[1]

    def click_text(self, text: str, scope: str = "body", until: str | None = None, what: str = "") -> None:
        """Click the innermost visible element whose text is exactly `text`; with `until` (a JS
        expression), click again (3 tries) until it holds: a re-render can move the element."""
        for attempt in range(3):
            self.click_at(*self.center(f"{FIND_JS}({json.dumps(text)}, {json.dumps(scope)})",
                                       f"an element reading {text!r}"))
            if until is None:
                return
            try:
                self.wait_for(until, what or f"the click on {text!r} to take effect", min(10, self.timeout))
                return
            except Fail:
                if attempt == 2:
                    raise

    def type_text(self, text: str) -> None:
        self.send("Input.insertText", {"text": text})

    def shot(self, path: str) -> None:
        self.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        print(f"wrote {path}")


# --------------------------------------------------------------------------- the search in MLflow

def snapshot(store: str, dest: str) -> None:
    """Copy the sqlite store with sqlite3's online backup: consistent, and the store is only read."""
    try:
        src = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(store))}?mode=ro", uri=True)
        with contextlib.closing(src), contextlib.closing(sqlite3.connect(dest)) as dst:
            src.backup(dst)
            tables = {r[0] for r in dst.execute("select name from sqlite_master where type = 'table'")}
    except sqlite3.Error as e:
        raise Fail(f"{store}: not a readable sqlite database ({e})") from None
    if not {"experiments", "runs", "tags"} <= tables:
        raise Fail(f"{store}: not an MLflow store (no experiments/runs/tags tables)")


def find_search(db: str, experiment: str, stage: str | None, model: str) -> dict:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = ", ".join(e.name for e in client.search_experiments(view_type=ViewType.ALL))
        raise Fail(f"no experiment named {experiment!r} in the store (it has: {names or 'none'})")
    parents = client.search_runs([exp.experiment_id], "tags.kind = 'search'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise Fail(f"experiment {experiment!r} has no search run (a run tagged kind = search)")
    parent = parents[0]
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        order_by=["attributes.start_time ASC"], max_results=5000)
    by_stage: dict[str, list] = {}
    for run in children:
        by_stage.setdefault(run.data.tags.get("stage", ""), []).append(run)
    if stage is None:
        counts = {s: len(by_stage.get(s, [])) for s in STAGES}
        stage = max(STAGES, key=lambda s: counts[s])
        if not counts[stage]:
            raise Fail(f"the search run has no trials of {', '.join(STAGES)}; choose one with --stage")
    runs = by_stage.get(stage)
    if not runs:
        known = ", ".join(sorted(s for s in by_stage if s))
        raise Fail(f"the search run has no trials tagged stage = {stage!r} (it has: {known or 'none'})")
    models = {m.name: m for m in client.search_logged_models(
        [exp.experiment_id], filter_string=f"source_run_id = '{parent.info.run_id}'")}
    if model not in models:
        raise Fail(f"the search run has no logged model {model!r} (it has: {', '.join(sorted(models)) or 'none'})")
    return {"experiment_id": exp.experiment_id, "parent": parent, "stage": stage, "runs": runs,
            "model": models[model]}


def varying_params(runs) -> list[str]:
    """Numeric parameters whose values differ between the runs (the seed left out)."""
    def number(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    keys = sorted(set().union(*(r.data.params for r in runs)))
    return [k for k in keys if k != "seed"
            and all(number(r.data.params.get(k)) is not None for r in runs)
            and len({r.data.params.get(k) for r in runs}) > 1]


# --------------------------------------------------------------------------- the three pictures

def prepare(page: Page, base: str, s: dict, metric: str) -> None:
    """Seed the UI's saved state, as a user clicking through it would leave it: the assistant panel
    closed, the 'Model training' workflow, and the runs table's columns and their widths."""
    page.goto(f"{base}/health")  # any page of the server's origin, to reach its localStorage
    page.wait_for("location.href.endsWith('/health')", "the server's origin")
    longest = max(len(r.info.run_name or "") for r in [s["parent"], *s["runs"]])
    widths = {"attributes.`Run Name`": 110 + 8 * longest, "runDateAndNestInfo": 150, "duration": 80,
              "attributes.`Models`": 200, f"metrics.`{metric}`": 170, "tags.`stage`": 90,
              "tags.`winner_of`": 120}  # the UI applies widths only with an order of columns
    state = {"selectedColumns": list(widths)[3:], "columnOrder": list(widths), "columnWidths": widths}
    table_key = f'MLflowLocalStorage-1.1-ExperimentPage-["{s["experiment_id"]}"]-ReactComponentState'
    page.js(f"""
        localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
        localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
        localStorage.setItem('mlflow.workflowType_v1', '"machine_learning"');
        localStorage.setItem({json.dumps(table_key)}, {json.dumps(json.dumps(state))});
        true""")


def open_ui(page: Page, url: str, ready_text: str) -> None:
    page.goto(url)
    page.wait_for_text(ready_text)
    page.js(f"""(() => {{ const s = document.createElement('style'); s.textContent = {json.dumps(HIDE_CSS)};
        document.head.appendChild(s);
        const close = document.querySelector('[data-component-id="mlflow.assistant.chat_panel.close"]');
        if (close) close.click(); return true; }})()""")


def trials_table(page: Page, base: str, s: dict, path: str) -> None:
    parent, child = s["parent"].info.run_name, s["runs"][0].info.run_name
    # the link the search prints
    open_ui(page, f"{base}/#/experiments/{s['experiment_id']}/runs?workflowType=machine_learning", parent)
    if not page.js(f"!!{FIND_JS}({json.dumps(child)}, 'body')"):
        # the expander is the button in the parent run's name cell
        page.click_at(*page.center(f"""(() => {{ const name = {FIND_JS}({json.dumps(parent)}, 'body');
            const cell = name && name.closest('[role="gridcell"], .ag-cell');
            return cell && cell.querySelector('button'); }})()""", "the parent run's expander"))
        page.wait_for(f"!!{FIND_JS}({json.dumps(child)}, 'body')", "the trials under the parent run")
    page.settle()
    page.shot(path)


def select_values(page: Page, label: str, want: list[str]) -> None:
    """Make the multi-select after the text `label` hold exactly `want` (remove the rest, add the missing)."""
    select = f"""({FIND_JS}({json.dumps(label)}, 'body')?.nextElementSibling)"""
    chosen = page.js(f"""[...{select}.querySelectorAll('[class*="select-selection-item-content"]')]
                         .map(e => e.textContent)""")
    for value in chosen:
        if value not in want:
            page.click_at(*page.center(f"""[...{select}.querySelectorAll('[class*="select-selection-item"]')]
                .find(e => e.querySelector('[class*="item-content"]')?.textContent === {json.dumps(value)})
                ?.querySelector('[class*="item-remove"]')""", f"the remove button of {value!r}"))
            page.wait_for(f"""![...{select}.querySelectorAll('[class*="select-selection-item-content"]')]
                               .some(e => e.textContent === {json.dumps(value)})""", f"{value!r} to go")
    for value in want:
        if value in chosen:
            continue
        page.click_at(*page.center(f"{select}.querySelector('[class*=\"select-selector\"]')",
                                   f"the {label} selector"))
        page.type_text(value)
        page.click_text(value, scope='[class*="select-dropdown"]:not([class*="dropdown-hidden"])')
        page.wait_for(f"""[...{select}.querySelectorAll('[class*="select-selection-item-content"]')]
                          .some(e => e.textContent === {json.dumps(value)})""", f"{value!r} to be chosen")
    page.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Escape", "code": "Escape",
                                          "windowsVirtualKeyCode": 27})
    page.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": "Escape", "code": "Escape",
                                          "windowsVirtualKeyCode": 27})


def compare_stage(page: Page, base: str, s: dict, metric: str, path: str) -> None:
    if not all(metric in r.data.metrics for r in s["runs"]):
        raise Fail(f"not every {s['stage']} trial has the metric {metric!r}")
    ids = [r.info.run_id for r in s["runs"]]
    compact = {"separators": (",", ":")}
    query = urllib.parse.urlencode({"runs": json.dumps(ids, **compact),
                                    "experiments": json.dumps([s["experiment_id"]], **compact),
                                    "workflowType": "machine_learning"}, quote_via=urllib.parse.quote)
    open_ui(page, f"{base}/#/compare-runs?{query}", f"Comparing {len(ids)} Runs")
    page.wait_for_text("Parallel Coordinates Plot")
    page.wait_for("!!document.querySelector('.js-plotly-plot')", "the parallel coordinates plot")
    select_values(page, "Parameters:", varying_params(s["runs"]))
    select_values(page, "Metrics:", [metric])
    page.wait_for(f"""[...document.querySelectorAll('.js-plotly-plot text')]
                      .some(e => e.textContent === {json.dumps(metric)})""", f"the {metric} axis")
    page.settle()
    page.shot(path)


def parent_report(page: Page, base: str, s: dict, artifact: str, path: str) -> None:
    run = s["parent"].info
    open_ui(page, f"{base}/#/experiments/{s['experiment_id']}/runs/{run.run_id}/artifacts", "Artifacts")
    parts = artifact.split("/")
    page.wait_for(f"!!{FIND_JS}({json.dumps(parts[0])}, 'body')", f"{parts[0]!r} in the artifact tree")
    page.settle()
    for folder, inside in zip(parts, parts[1:]):  # open the folders that are still closed
        shown = f"!!{FIND_JS}({json.dumps(inside)}, 'body')"
        if not page.js(shown):
            page.click_text(folder, until=shown, what=f"{inside!r} in the artifact tree")
    # the file's preview has its path as a heading, and a line 'Path: <where it is stored>'
    page.click_text(parts[-1], until=f"!!{FIND_JS}({json.dumps(artifact)}, 'body') && "
                    "document.body.innerText.includes('Path: ')", what=f"the preview of {artifact}")
    if artifact.endswith(".md"):
        page.wait_for("!!document.querySelector('h1, h2, table')", "the rendered markdown")
    elif artifact.endswith((".png", ".jpg", ".jpeg", ".gif", ".svg")):
        page.wait_for("[...document.images].some(i => i.complete && i.naturalWidth > 300)", "the image")
    page.settle()
    page.shot(path)


def page_of(page: Page, url: str, ready_text: str, path: str) -> None:
    """A page that needs no clicks: open it, wait for its content, shoot."""
    open_ui(page, url, ready_text)
    page.settle()
    page.shot(path)


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Starts `mlflow ui` on a copy of the store and drives "
        "headless Chromium (apt-get install -y chromium) over the DevTools pipe; both are stopped "
        "at the end. Errors are one line, exit code 2 (1 if the UI does not show what is expected).",
        epilog="Example: python scripts/mlflow_screenshots.py --store runs/mlflow.db "
        "--experiment focus-tune/hero --out docs/img --stage joint",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--store", required=True, help="the search's sqlite MLflow store (mlflow.db); only read")
    ap.add_argument("--experiment", required=True, help="experiment name, e.g. focus-tune/hero")
    ap.add_argument("--out", default="docs/img", help="folder for the PNG files (created if missing)")
    ap.add_argument("--stage", default=None,
                    help="the stage (tag `stage`) to compare; default: the one of "
                    f"{'/'.join(STAGES)} with the most trials")
    ap.add_argument("--metric", default="val/ece", help="the metric to compare the trials on")
    ap.add_argument("--report-artifact", default="report/results.md",
                    help="the parent run's artifact to show (e.g. report/search.png)")
    ap.add_argument("--table-name", default="mlflow_trials_table.png")
    ap.add_argument("--compare-name", default="mlflow_compare_stage.png")
    ap.add_argument("--report-name", default="mlflow_parent_report.png")
    ap.add_argument("--run-name", default="mlflow_search_run.png")
    ap.add_argument("--model-name", default="mlflow_logged_model.png")
    ap.add_argument("--model", default="model-time-dependent", help="the parent run's logged model to show")
    ap.add_argument("--size", default="1600x1000", help="browser window, WIDTHxHEIGHT in CSS pixels")
    ap.add_argument("--timeout", type=float, default=90, help="seconds to wait for the server or a page")
    args = ap.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on `kill` too
    try:
        try:
            width, height = (int(v) for v in args.size.lower().split("x"))
        except ValueError:
            raise Fail(f"--size {args.size!r}: expected WIDTHxHEIGHT, e.g. 1600x1000") from None
        browser = shutil.which("chromium")
        if not browser:
            raise Fail("`chromium` not found on PATH; install it once: "
                       "sudo apt-get update && sudo apt-get install -y chromium")
        if not os.path.isfile(args.store):
            raise Fail(f"no such store: {args.store}")
        with tempfile.TemporaryDirectory(prefix="mlflow-shots-", ignore_cleanup_errors=True) as tmp:
            db = os.path.join(tmp, "mlflow.db")
            snapshot(args.store, db)
            search = find_search(db, args.experiment, args.stage, args.model)
            print(f"experiment {search['experiment_id']}, search run {search['parent'].info.run_name} "
                  f"({search['parent'].info.run_id}), {len(search['runs'])} {search['stage']} trials")
            os.makedirs(args.out, exist_ok=True)
            server = chromium = None
            try:
                server, base = start_mlflow_ui(db, tmp, args.timeout)
                print(f"mlflow ui at {base}")
                chromium = CDP(browser, os.path.join(tmp, "chromium-profile"),
                               os.path.join(tmp, "chromium.log"))
                page = Page(chromium, width, height, args.timeout)
                prepare(page, base, search, args.metric)
                trials_table(page, base, search, os.path.join(args.out, args.table_name))
                compare_stage(page, base, search, args.metric, os.path.join(args.out, args.compare_name))
                parent_report(page, base, search, args.report_artifact,
                              os.path.join(args.out, args.report_name))
                parent = search["parent"].info
                page_of(page, f"{base}/#/experiments/{search['experiment_id']}/runs/{parent.run_id}",
                        "Logged models", os.path.join(args.out, args.run_name))
                model = search["model"]
                page_of(page, f"{base}/#/experiments/{search['experiment_id']}/models/{model.model_id}",
                        model.name, os.path.join(args.out, args.model_name))
            finally:  # before the temporary folder goes: both write into it
                if chromium:
                    chromium.close()
                stop(server)
        return 0
    except Fail as e:
        print(f"mlflow_screenshots: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("mlflow_screenshots: interrupted", file=sys.stderr)
        return 130

if __name__ == "__main__":
    sys.exit(main())
