"""cluster.yaml: valid for Ray's own launcher (offline) and true to what docs/CLUSTER.md promises.

Validation is Ray's: ``prepare_config`` (merge with the AWS defaults, as ``ray up`` does) then
``validate_config`` (the launcher's JSON schema). The invariants below are ours: a head that
takes no trials, autoscaled GPU workers, the project installed at the pins of pyproject.toml,
storage every node reaches, MLflow and the dashboard on loopback only, token auth everywhere,
no port open to the internet but SSH.
"""

import copy
import ipaddress
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parent.parent
PINNED = ("torch", "torchvision", "ray", "mlflow")


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


@pytest.fixture(scope="module")
def cfg(raw) -> dict:
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    return config


def commands(cfg: dict, *keys: str) -> list[str]:
    keys = keys or ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                    "head_start_ray_commands", "worker_start_ray_commands")
    out = [c for k in keys for c in cfg.get(k, [])]
    for node in cfg["available_node_types"].values():
        for k in keys:
            out += node.get(k, []) if k in ("initialization_commands", "worker_setup_commands") else []
    return out


def flag(command: str, name: str) -> str | None:
    m = re.search(rf"(?:^|\s){re.escape(name)}(?:=|\s+)(\S+)", command)
    return m.group(1) if m else None


def test_validates_with_rays_launcher(cfg):
    assert cfg["provider"]["type"] == "aws"
    assert cfg["head_node_type"] in cfg["available_node_types"]


def test_the_validator_is_strict(raw):
    # Guard against a validator that accepts anything: a misspelled key must fail.
    broken = copy.deepcopy(raw)
    broken["setup_comands"] = ["true"]
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))


def test_head_runs_no_trials(cfg):
    head = cfg["available_node_types"][cfg["head_node_type"]]
    assert head["resources"].get("CPU") == 0 and head["resources"].get("GPU", 0) == 0
    assert head["max_workers"] == 0
    start = " ".join(cfg["head_start_ray_commands"])
    assert flag(start, "--num-cpus") == "0" and flag(start, "--num-gpus") == "0"


def test_gpu_workers_autoscale(cfg):
    workers = {k: v for k, v in cfg["available_node_types"].items() if k != cfg["head_node_type"]}
    gpu = {k: v for k, v in workers.items() if v["resources"].get("GPU", 0) >= 1}
    assert gpu, "no GPU worker type"
    for name, node in gpu.items():
        assert 0 <= node["min_workers"] <= node["max_workers"], name
        assert node["max_workers"] >= 1, name
        assert node["node_config"]["InstanceType"].startswith(("g", "p")), name
    assert cfg["max_workers"] >= max(n["max_workers"] for n in gpu.values())


def test_setup_installs_the_project_at_its_pins(cfg):
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for d in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;]+)", d)
        if m and m.group(1) in PINNED:
            pins[m.group(1)] = m.group(3)
    assert set(pins) == set(PINNED), f"pyproject.toml no longer pins {set(PINNED) - set(pins)}"
    locked = lock_file()
    for name, version in pins.items():
        assert locked.get(name) == version, (name, version, locked.get(name))
    for setup in ("head_setup_commands", "worker_setup_commands"):  # setup_commands merged into both
        text = " ".join(cfg[setup])
        assert "-r ~/focus-tune/requirements-cluster.txt" in text, setup
        assert "--no-deps -e ~/focus-tune" in text, setup
    # The repository is what gets installed: synced to the path pip installs.
    assert cfg["file_mounts"].get("/home/ubuntu/focus-tune") == "."


def test_storage_every_node_reaches(cfg):
    for setup in ("head_setup_commands", "worker_setup_commands"):
        mounts = [c for c in cfg[setup] if "mount -t nfs4" in c]
        assert mounts and "/mnt/focus" in mounts[0], setup
    # The documented cluster search writes its Tune storage there.
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    submit = re.search(r"ray job submit .*?(?=\n```)", doc, re.S)
    assert submit and "--address auto" in submit.group(0)
    assert re.search(r"--storage\s+/mnt/focus/\S+", submit.group(0)), submit.group(0)


def test_mlflow_server_on_loopback_with_s3_artifacts(cfg):
    server = [c for c in cfg["head_start_ray_commands"] + cfg["head_setup_commands"] if "mlflow server" in c]
    assert len(server) == 1
    cmd = server[0]
    host = flag(cmd, "--host")
    assert host in ("127.0.0.1", "localhost") or ipaddress.ip_address(host).is_private and host != "0.0.0.0"
    assert flag(cmd, "--workers") == "1"
    assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in cmd
    assert flag(cmd, "--artifacts-destination").startswith("s3://")
    assert flag(cmd, "--backend-store-uri").startswith("sqlite:////")
    # And the store on the EFS, not the head's disk, so that it outlives `ray down`: its folder
    # is made by the setup commands, which run (and mount the EFS) before the start commands.
    store = Path(flag(cmd, "--backend-store-uri").removeprefix("sqlite:///"))
    assert store.is_relative_to("/mnt/focus"), store
    assert any(str(store.parent) in c.split() for c in cfg["head_setup_commands"] if "mkdir" in c), store.parent
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    assert f"`{store}`" in doc and "`ray down` leaves it" in doc
    # And on no worker.
    assert not [c for c in commands(cfg, "worker_setup_commands", "worker_start_ray_commands") if "mlflow server" in c]


def test_nothing_listens_on_all_interfaces(cfg):
    everything = " ".join(commands(cfg))
    assert "0.0.0.0" not in everything and "::/0" not in everything
    assert flag(" ".join(cfg["head_start_ray_commands"]), "--dashboard-host") in ("127.0.0.1", "localhost")
    for rule in cfg["provider"].get("security_group", {}).get("IpPermissions", []):
        assert rule.get("FromPort") == 22 and rule.get("ToPort") == 22, rule  # SSH at most


def test_token_auth_in_every_process(cfg):
    starts = [c for c in commands(cfg, "head_start_ray_commands", "worker_start_ray_commands") if "ray start" in c]
    assert len(starts) == 2
    for c in starts:
        assert "RAY_AUTH_MODE=token ray start" in c, c
    assert any("export RAY_AUTH_MODE=token" in c for c in cfg["initialization_commands"])
    assert cfg["file_mounts"].get("/home/ubuntu/.ray/auth_token") == "~/.ray/auth_token"
    assert "RAY_AUTH_MODE=disabled" not in " ".join(commands(cfg))


def lock_file() -> dict[str, str]:
    """requirements-cluster.txt as {name: version}; every line must be an exact pin."""
    out = {}
    for line in (ROOT / "requirements-cluster.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+!-]+)", line)
        assert m, f"requirements-cluster.txt: {line!r} is not an exact pin"
        out[m.group(1).lower()] = m.group(2)
    return out


def test_nothing_installed_unpinned(cfg):
    """No `curl | sh`, no package without its exact version, no requirement the lock file lacks."""
    locked = lock_file()
    assert {"ray", "torch", "mlflow", "boto3", "aiohttp"} <= set(locked)
    for command in commands(cfg):
        assert not re.search(r"(curl|wget)[^|]*\|\s*(ba|z)?sh", command), command
        for m in re.finditer(r"(?:pip|uv pip) install (.*)", command):
            for arg in m.group(1).split():
                arg = arg.strip('"\'')
                if arg.startswith("-") or arg.startswith("~/") or arg.startswith("/"):
                    continue
                assert re.fullmatch(r"[A-Za-z0-9_.\[\],-]+==[A-Za-z0-9_.+-]+", arg), (arg, command)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in pyproject:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower().replace("_", "-")
        assert name in locked, f"{name} (pyproject.toml) is missing from requirements-cluster.txt"
