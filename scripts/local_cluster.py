"""A real multi-node Ray cluster on one machine, for trying the cluster path without a cloud.

Starts a head and ``--nodes - 1`` worker nodes with ``ray start`` on loopback, each with
explicit ``--num-cpus/--memory/--object-store-memory`` (Ray's own memory detection over-counts
on small machines), its own ``--temp-dir`` and free ports, and token authentication: every
process (the nodes, and any command run against them) gets the same ``RAY_AUTH_MODE=token``
and ``RAY_AUTH_TOKEN_PATH`` pointing at a token made for this cluster only (nothing is written
to ``~/.ray``).

Stopping is precise: ``ray stop`` would kill every Ray process on the machine, including other
people's. Here each node is started with ``ray start --block`` in a new session, and ``down``
signals only processes of those sessions or whose command line names this cluster's root
folder.

Usage::

    # start, run one command against the cluster, verify, always stop
    python scripts/local_cluster.py run --verify -- \\
        python -m focus_tune.search --game facemed --profile smoke \\
        --address {address} --storage {root}/runs --tracking-uri sqlite:///{root}/mlflow.db \\
        --data-root {root}/data_cache --cpus-per-trial 1

    # or keep it up while you work in another shell
    python scripts/local_cluster.py up --root /tmp/ftc     # prints the exports to use
    python scripts/local_cluster.py down --root /tmp/ftc

``verify`` checks a finished search: each trial's worker process is found in exactly one node's
log folder (both nodes share 127.0.0.1, so the IP cannot tell them apart; the pid can), every
node ran at least one trial, and MLflow holds one FINISHED parent run with one FINISHED child
per trial, each tagged with its stage and family.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE = "cluster.json"
GiB = 1024**3
MiB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_bin() -> str:
    """The ``ray`` CLI of the running interpreter's environment."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else "ray"


@dataclass
class Node:
    name: str
    temp_dir: str
    pid: int  # the `ray start --block` process: session leader of everything it starts
    log: str


@dataclass
class LocalCluster:
    """``with LocalCluster(root) as c:`` starts the nodes and always stops them."""

    root: Path
    nodes_wanted: int = 2
    cpus: float = 1
    memory: int = 3 * GiB
    object_store_memory: int = 256 * MiB
    port: int = 0
    # Ray's fake multi-node autoscaler: {node type: {"resources": {...}, "min_workers", "max_workers"}};
    # the head then runs no trials' worth of GPUs and the autoscaler adds and removes such nodes.
    autoscale: dict | None = None
    idle_timeout_minutes: float = 0.1
    nodes: list[Node] = field(default_factory=list)
    node_ids: dict[str, str] = field(default_factory=dict)  # Ray node id -> our node name
    started_at: float = 0.0

    # -- environment shared by every process of this cluster ----------------------------------
    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token_path(self) -> Path:
        return Path(self.root) / "auth_token"

    @property
    def env(self) -> dict[str, str]:
        """The variables to add to a process's environment to talk to this cluster."""
        return {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_path),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ADDRESS": self.address,
        }

    def full_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN",)}
        env.update(self.env)
        return env

    # -- start / stop ---------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> "LocalCluster":
        if os.path.islink(self.root):
            raise RefusedRoot(f"{self.root}: the cluster root must be a folder, not a symbolic link")
        self.root = Path(self.root).resolve()
        # Ray's unix sockets live at <root>/<node>/session_<40 chars>/sockets/plasma_store and a
        # socket path may have at most 107 bytes.
        if len(str(self.root)) > 32:
            raise ValueError(f"cluster root {self.root} is too long for Ray's socket paths; use e.g. /tmp/ftc")
        _claim_root(self.root)
        # A token made here, never one found there: O_EXCL fails if the file (or a link) exists.
        fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        self.port = self.port or free_port()
        self.started_at = time.time()
        try:
            head = ["--head", f"--port={self.port}", "--include-dashboard=false"]
            if self.autoscale:
                head.append(f"--autoscaling-config={self._autoscaler_config()}")
            env = {"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"} if self.autoscale else None
            self._start_node("head", head, timeout, env=env)
            for i in range(1, self.nodes_wanted):
                self._start_node(f"worker{i}", [f"--address={self.address}"], timeout)
            self.save()
            for info in self.wait_for_nodes(self.nodes_wanted, timeout):
                # Both nodes share 127.0.0.1; their socket paths name their temp dirs.
                for node in self.nodes:
                    if info["RayletSocketName"].startswith(str(Path(node.temp_dir).resolve()) + "/"):
                        self.node_ids[info["NodeID"]] = node.name
            if len(self.node_ids) != len(self.nodes):
                raise RuntimeError(f"could not tell the nodes apart by their sockets: {self.node_ids}")
            self.save()
        except BaseException:
            self.stop()
            raise
        return self

    def _autoscaler_config(self) -> Path:
        """The config of Ray's fake multi-node provider: worker nodes are Ray nodes started on
        this machine by the head's autoscaler, with the resources of their node type."""
        types = {"ray.head.default": {"resources": {"CPU": self.cpus, "GPU": 0}, "node_config": {}, "max_workers": 0}}
        for name, spec in self.autoscale.items():
            resources = {"object_store_memory": int(self.object_store_memory), **spec["resources"]}
            types[name] = {"resources": resources, "node_config": {}, "min_workers": spec.get("min_workers", 0),
                           "max_workers": spec["max_workers"]}
        config = {
            "cluster_name": "focus-tune-local", "max_workers": sum(t["max_workers"] for t in types.values()),
            "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                         "disable_launch_config_check": True, "gcs_address": self.address},
            "available_node_types": types, "head_node_type": "ray.head.default", "auth": {},
            "upscaling_speed": 1.0, "idle_timeout_minutes": self.idle_timeout_minutes, "docker": {},
            **{k: [] for k in ("initialization_commands", "setup_commands", "head_setup_commands",
                               "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands",
                               "cluster_synced_files", "rsync_exclude", "rsync_filter")},
            "file_mounts": {}, "file_mounts_sync_continuously": False,
        }
        path = Path(self.root) / "autoscaler.json"
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as f:
            f.write(json.dumps(config, indent=1))
        return path

    def _start_node(self, name: str, extra: list[str], timeout: float, env: dict | None = None,
                    wrap: list[str] | None = None) -> None:
        temp_dir = self.root / name  # per node: its own session and log folders
        temp_dir.mkdir(mode=0o700)  # new: fails if anything (a link too) is there already
        log = self.root / f"{name}.log"
        cmd = [
            *(wrap or []), _ray_bin(), "start", "--block", *extra,
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.cpus:g}", "--num-gpus=0",
            f"--memory={int(self.memory)}", f"--object-store-memory={int(self.object_store_memory)}",
            f"--temp-dir={temp_dir}",
            # Fixed default ports (8265, 52365) would collide with another Ray on this machine.
            f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            "--disable-usage-stats",
        ]
        with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**self.full_env(), **(env or {})}, start_new_session=True)
        node = Node(name, str(temp_dir), proc.pid, str(log))
        self.nodes.append(node)
        self.save()
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if proc.poll() is not None:
                raise RuntimeError(f"`ray start` for {name} exited with {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.3)
        raise TimeoutError(f"{name} did not start in {timeout:.0f}s; see {log}")

    def alive_nodes(self) -> list[dict]:
        """The cluster's alive nodes as Ray sees them (asked from a fresh process)."""
        code = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                "print('NODES=' + json.dumps([{k: n[k] for k in "
                "('NodeID', 'NodeManagerAddress', 'RayletSocketName', 'Resources')} "
                "for n in ray.nodes() if n['Alive']]))" % self.address)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self.full_env(),
                             timeout=120, cwd=self.root)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("NODES=")), None)
        if line is None:
            raise RuntimeError(f"could not list the nodes of {self.address}:\n"
                               f"{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        return json.loads(line.removeprefix("NODES="))

    def wait_for_nodes(self, n: int, timeout: float) -> list[dict]:
        deadline = time.time() + timeout
        while True:
            try:
                nodes = self.alive_nodes()
            except RuntimeError:
                if time.time() > deadline:
                    raise
                nodes = []
            if len(nodes) >= n:
                return nodes
            if time.time() > deadline:
                raise TimeoutError(f"{len(nodes)} of {n} nodes alive after {timeout:.0f}s")
            time.sleep(1)

    def processes(self) -> list[int]:
        """Pids of every live process of this cluster: those in a node's session (``ray start``
        leads it; Ray gives workers their own process groups, not sessions), or Ray processes
        naming the cluster's root folder on the command line (Ray passes the temp dir to what it
        starts)."""
        return self._processes({n.pid for n in self.nodes}, str(Path(self.root).resolve()) + "/")

    def node_processes(self, name: str) -> list[int]:
        """Pids of the live processes of one node: its raylet, workers, agents (its GCS for the head)."""
        node = next(n for n in self.nodes if n.name == name)
        return self._processes({node.pid}, str(Path(node.temp_dir).resolve()) + "/")

    def kill_node(self, name: str) -> list[int]:
        """Lose a node as a preempted machine loses it: SIGKILL to all its processes at once,
        nothing said to the GCS beforehand. Returns the pids killed."""
        pids = self.node_processes(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while self.node_processes(name) and time.time() < deadline:
            _reap()
            time.sleep(0.1)
        _reap()
        return pids

    def add_node(self, name: str, timeout: float = 90.0, wrap: list[str] | None = None) -> None:
        """Start one more worker node (a replacement for a lost one) and wait until Ray lists it;
        ``wrap`` prefixes its ``ray start`` command (e.g. ``unshare`` for a node with its own mounts)."""
        self._start_node(name, [f"--address={self.address}"], timeout, wrap=wrap)
        temp = str(Path(self.nodes[-1].temp_dir).resolve()) + "/"
        deadline = time.time() + timeout
        while name not in self.node_ids.values():
            for info in self.alive_nodes():
                if info["RayletSocketName"].startswith(temp):
                    self.node_ids[info["NodeID"]] = name
            if name not in self.node_ids.values():
                if time.time() > deadline:
                    raise TimeoutError(f"node {name} not listed by Ray after {timeout:.0f}s")
                time.sleep(1)
        self.save()

    def _processes(self, sessions: set[int], marker: str) -> list[int]:
        me = os.getpid()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                stat = (entry / "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                state, sid = fields[0], int(fields[3])
                if state == "Z":
                    continue
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError):
                continue
            if sid in sessions or (marker in cmdline and _is_ray(cmdline)):
                pids.append(int(entry.name))
        return pids

    def stop(self, grace: float = 5.0) -> list[int]:
        """Stop every process of this cluster and nothing else; returns the pids signalled.

        SIGTERM first; whatever is left after ``grace`` seconds gets SIGKILL (a GCS server can
        take more than 15 s to exit on SIGTERM; this cluster keeps nothing worth waiting for)."""
        signalled: set[int] = set()
        for sig, seconds in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            for pid in self.processes():
                try:
                    os.kill(pid, sig)
                    signalled.add(pid)
                except ProcessLookupError:
                    pass
            deadline = time.time() + seconds
            while time.time() < deadline and self.processes():
                _reap()
                time.sleep(0.2)
        _reap()
        left = self.processes()
        if left:
            raise RuntimeError(f"processes of {self.root} still alive after SIGKILL: {left}")
        state = Path(self.root) / STATE
        if state.exists():
            state.unlink()
        return sorted(signalled)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- persistence for up/down ------------------------------------------------------------------
    def save(self) -> None:
        data = asdict(self)
        data["root"] = str(self.root)
        file = Path(self.root) / STATE
        tmp = file.with_name(f".{STATE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)  # replaces the name, never writes through a link

    @classmethod
    def load(cls, root: Path) -> "LocalCluster":
        root = Path(root)
        _check_owned(root, "cluster root")
        file = root / STATE
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
        if os.fstat(fd).st_uid != os.getuid():
            os.close(fd)
            raise RefusedRoot(f"{file}: owned by another user; not a cluster of ours")
        with os.fdopen(fd) as f:
            data = json.loads(f.read())
        if Path(data.get("root", "")).resolve() != root.resolve():
            raise RefusedRoot(f"{file}: records the root {data.get('root')!r}, not {root}; not a cluster of ours")
        data["nodes"] = [Node(**n) for n in data["nodes"]]
        data["root"] = Path(data["root"])
        return cls(**data)


class RefusedRoot(RuntimeError):
    """A --root this script did not create (or cannot trust): it is left untouched."""


def _check_owned(path: Path, what: str) -> None:
    """A real folder (not a link), ours, that no other user can write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise RefusedRoot(f"{path}: no such {what}") from None
    import stat as stat_

    if stat_.S_ISLNK(st.st_mode) or not stat_.S_ISDIR(st.st_mode):
        raise RefusedRoot(f"{path}: the {what} must be a folder, not a symbolic link or a file")
    if st.st_uid != os.getuid():
        raise RefusedRoot(f"{path}: the {what} belongs to another user; choose a new folder")
    if st.st_mode & 0o022:
        raise RefusedRoot(f"{path}: the {what} is writable by other users (mode {oct(st.st_mode & 0o777)}); "
                          "choose a new folder")


def _claim_root(root: Path) -> None:
    """Create ``root`` (mode 0700), or accept it only if it is an empty folder of ours that no
    one else can write (e.g. made by ``mktemp -d``): never a folder, a token or a link that
    someone else prepared."""
    try:
        root.mkdir(mode=0o700, parents=True)
        return
    except FileExistsError:
        pass
    _check_owned(root, "cluster root")
    if any(root.iterdir()):
        raise RefusedRoot(f"{root}: the cluster root is not empty; this script only uses a folder it creates "
                          "(or an empty one of yours): choose a new --root")


def _is_ray(cmdline: str) -> bool:
    """A Ray process (not, say, a `tail -f` of one of its logs)."""
    return cmdline.startswith("ray::") or bool(re.search(r"(^|/)ray(/| |$)", cmdline))


def _reap() -> None:
    """Collect exited children (the `ray start` processes) so they do not linger as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# -- checking a finished search ------------------------------------------------------------------
def trial_results(storage: Path) -> dict[str, dict]:
    """trial id -> its last result's ``pid`` and ``node_id`` (when reported), from Tune's saved
    experiment state.

    Every result Tune records carries the reporting process's ``pid`` (and ``node_ip``, the
    same for both nodes here); the search's ``experiment_state-*.json`` holds, per trial, the
    trial (named with our trial id) and its run metadata (with its last result).

    Tune writes that file in place (``open(..., "w")`` and ``json.dump``, not a rename), one per
    driver session, so a driver killed while writing leaves it empty or cut off. Such a file is
    skipped when a later session's file parses (a resumed driver restores every trial and
    writes them all again); a search whose newest state does not parse raises ValueError naming
    the file.
    """
    out: dict[str, dict] = {}
    files = sorted(Path(storage).rglob("experiment_state-*.json"),
                   key=lambda f: (str(f.parent), f.stat().st_mtime, f.name))
    for i, state_file in enumerate(files):
        try:
            data = json.loads(state_file.read_text())
        except json.JSONDecodeError as e:
            if i == len(files) - 1 or files[i + 1].parent != state_file.parent:
                raise ValueError(f"{state_file}: the newest Tune experiment state of its search does not "
                                 f"parse ({e})") from e
            continue  # a killed driver's cut-off state; the resumed one's file holds its trials
        for trial_json, metadata_json in data.get("trial_data", []):
            trial, metadata = json.loads(trial_json), json.loads(metadata_json)
            last = metadata.get("last_result") or {}
            if isinstance(last, str):
                last = json.loads(last)
            tid = trial["custom_trial_name"]  # the search names each Tune trial with its trial id
            if "pid" in last:
                out[tid] = {"pid": int(last["pid"]), "node_id": last.get("node_id")}
    return out


def node_of_pid(cluster: LocalCluster, pid: int) -> list[str]:
    """The nodes whose log folder has a worker log of this pid (Ray names them
    ``worker-<id>-<job>-<pid>.out`` and ``python-core-worker-<id>_<pid>.log``)."""
    found = []
    pat = re.compile(rf"(^worker-.*-{pid}\.(out|err)$)|(^python-core-worker-.*_{pid}\.log$)")
    for node in cluster.nodes:
        logs = list(Path(node.temp_dir).glob("session_*/logs"))
        if any(pat.match(f.name) for d in logs for f in d.iterdir()):
            found.append(node.name)
    return found


def node_of(cluster: LocalCluster, result: dict) -> list[str]:
    """Where a trial ran: by the Ray node id its results report, else by its worker's pid."""
    node_id = result.get("node_id")
    if node_id and node_id in cluster.node_ids:
        return [cluster.node_ids[node_id]]
    return node_of_pid(cluster, result["pid"])


def placement(cluster: LocalCluster, storage: Path) -> dict[str, str]:
    """trial id -> the node its last result came from, for every trial that reported; raises
    AssertionError when there is none, or a trial is found on no node or on several."""
    results = trial_results(storage)
    assert results, f"no Tune experiment state with trial results under {storage}"
    where = {}
    for tid, result in sorted(results.items()):
        nodes = node_of(cluster, result)
        assert len(nodes) == 1, f"trial {tid} ({result}) found on nodes {nodes}"
        where[tid] = nodes[0]
    return where


def search_results(storage: Path) -> dict[str, float | None]:
    """trial id -> score of the one search under ``storage`` (its ``search_state.json``); None
    for a trial that ended without a score (its loss turned NaN, it kept failing)."""
    from focus_tune.procedure.state import STATE_FILE, read_state

    states = sorted(Path(storage).glob(f"*/{STATE_FILE}"))
    assert len(states) == 1, f"{len(states)} search states under {storage}: expected one search"
    return read_state(states[0].parent).results


def verify(cluster: LocalCluster, storage: Path, tracking_uri: str, experiment: str,
           every_node: bool = True) -> dict:
    """Where each trial ran, and whether MLflow holds the whole search; raises AssertionError.

    Every trial with a score reported from a node of the cluster (with ``every_node``, the
    trials used every node). MLflow: one FINISHED parent run and one child per trial of the
    search state, tagged with stage and family, FINISHED, or FAILED for a trial without a
    score."""
    where = placement(cluster, storage)
    results = search_results(storage)
    scored = {t for t, v in results.items() if v is not None}
    assert scored <= set(where) <= set(results), \
        f"trials with a score but no result on a node: {sorted(scored - set(where))}; " \
        f"results of trials the search does not know: {sorted(set(where) - set(results))}"
    used = sorted(set(where.values()))
    if every_node:
        wanted = sorted(n.name for n in cluster.nodes)
        assert used == wanted, f"trials ran on {used}, not on every node {wanted}: {where}"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r} in {tracking_uri}"
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, f"{len(parents)} parent runs"
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == len(runs) - 1, "runs that are neither the parent nor its children"
    assert parent.info.status == "FINISHED", f"parent run is {parent.info.status}"
    child_ids = sorted(r.data.tags.get("trial_id") for r in children)
    assert child_ids == sorted(results), f"MLflow children {child_ids} != the search's trials {sorted(results)}"
    for r in children:
        tags, tid = r.data.tags, r.data.tags.get("trial_id")
        want = "FINISHED" if tid in scored else "FAILED"
        assert r.info.status == want, f"{tid} is {r.info.status}, expected {want} (score {results[tid]})"
        assert tags.get("stage") and tags.get("family"), f"{tid} lacks stage/family tags"
    per_node = {n: sum(v == n for v in where.values()) for n in used}
    return {"placement": where, "trials_per_node": per_node, "children": len(children),
            "failed": sorted(set(results) - scored), "parent_run_id": parent.info.run_id}


# -- CLI -------------------------------------------------------------------------------------------
def _cluster_from(args) -> LocalCluster:
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="ftc-", dir="/tmp"))
    # Unix socket paths under the temp dir must stay short (about 107 bytes).
    return LocalCluster(root=root, nodes_wanted=args.nodes, cpus=args.cpus, memory=int(args.memory_gb * GiB),
                        object_store_memory=int(args.object_store_mb * MiB))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/local_cluster.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("up", "run"):
        s = sub.add_parser(name)
        s.add_argument("--root", help="cluster folder (default: a new /tmp/ftc-* folder); keep it short")
        s.add_argument("--nodes", type=int, default=2)
        s.add_argument("--cpus", type=float, default=1, help="CPUs per node")
        s.add_argument("--memory-gb", type=float, default=3, help="Ray memory resource per node")
        s.add_argument("--object-store-mb", type=float, default=256, help="object store per node")
    run = sub.choices["run"]
    run.add_argument("--verify", action="store_true",
                     help="after a focus_tune.search command, check trial placement and MLflow (see module doc)")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="after --: the command; {address} and {root} are replaced")
    down = sub.add_parser("down")
    down.add_argument("--root", required=True)
    args = p.parse_args(argv)

    try:
        if args.cmd == "down":
            if not (Path(args.root) / STATE).exists():
                print(f"no cluster recorded in {args.root}", file=sys.stderr)
                return 1
            pids = LocalCluster.load(Path(args.root)).stop()
            print(f"stopped {len(pids)} processes of {args.root}")
            return 0
        cluster = _cluster_from(args)
        _claim_root(Path(cluster.root))  # the path as given (a link is refused), before anything is written
        if args.cmd == "up":
            cluster.start()
    except (RefusedRoot, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.cmd == "up":
        print(f"{len(cluster.nodes)} nodes up at {cluster.address}; root {cluster.root}")
        print("in the shell that talks to it:")
        for k, v in cluster.env.items():
            print(f"  export {k}={shlex.quote(v)}")
        print(f"stop with: python scripts/local_cluster.py down --root {cluster.root}")
        return 0

    if not [c for c in args.command if c != "--"]:
        p.error("run needs a command after --")
    with cluster:
        # {address} is known once the head has its port.
        command = [c.format(address=cluster.address, root=cluster.root) for c in args.command if c != "--"]
        print(f"{len(cluster.nodes)} nodes up at {cluster.address}; root {cluster.root}", flush=True)
        t0 = time.time()
        rc = subprocess.run(command, env=cluster.full_env()).returncode
        print(f"command exited {rc} after {time.time() - t0:.0f}s", flush=True)
        if rc == 0 and args.verify:
            storage = Path(_flag(command, "--storage", "runs"))
            uri = _flag(command, "--tracking-uri", f"sqlite:///{Path.cwd() / 'mlflow.db'}")
            report = verify(cluster, storage, uri, f"focus-tune/{_flag(command, '--game', '')}")
            print(json.dumps(report, indent=1))
    return rc


def _flag(command: list[str], name: str, default: str) -> str:
    for i, c in enumerate(command):
        if c == name and i + 1 < len(command):
            return command[i + 1]
        if c.startswith(name + "="):
            return c.split("=", 1)[1]
    return default


if __name__ == "__main__":
    sys.exit(main())
