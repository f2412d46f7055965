"""Two local Rays one after the other in one process (a notebook's ``run_recipe`` then
``run_search``): each gets a token of its own and the driver presents the new one
(focus_tune.search.ray_runtime.secure_local_ray resets Ray's cached token)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CODE = textwrap.dedent("""
    import os
    from focus_tune.search.ray_runtime import secure_local_ray

    tokens = []
    for _ in range(2):
        secure_local_ray(None)  # before Ray is imported, as a search does
        tokens.append(os.environ.get("RAY_AUTH_TOKEN"))
        import ray

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        assert ray.get(ray.put(41)) + 1 == 42
        ray.shutdown()
    assert tokens[0] and tokens[1] and tokens[0] != tokens[1]
    print("two local Rays, two tokens")
""")


def test_a_second_local_ray_in_one_process_gets_a_token_of_its_own():
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "two local Rays, two tokens" in proc.stdout
