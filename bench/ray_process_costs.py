"""What Ray's processes cost on this machine: ``import ray`` with and without ``rfc3987_syntax``, and
``LocalCluster.shutdown()`` with the old 15 s SIGTERM grace and the new 3 s one.

Every Ray worker, actor, agent and job driver imports ray. With jsonschema>=4.24 and its format-nongpl
extra (which jupyter-events asks for, so any JupyterLab environment has it), importing ray imports
jsonschema, which imports ``rfc3987_syntax``, which compiles a Lark grammar at import time. The
project pins jsonschema<4.24; this measures what that saves, side by side in one run: each repetition
imports ray in a fresh interpreter once as installed and once with ``rfc3987_syntax`` blocked
(``sys.modules["rfc3987_syntax"] = None``, which jsonschema treats as "not installed"), so the two
arms see the same load. Where rfc3987_syntax is not installed (this project's .venv) both arms are
the same and the ratio is ~1; to see the cost, put jsonschema 4.26 and rfc3987-syntax in front:

    .venv/bin/python -m pip install -q --target /tmp/rfc "jsonschema==4.26.0" rfc3987-syntax
    PYTHONPATH=/tmp/rfc .venv/bin/python -m bench ray_process_costs [--reps 5] [--shutdown]

``--shutdown`` also starts the embedded local cluster twice and times ``shutdown(grace=15)`` (what it
did before) and ``shutdown()`` (3 s), checking that nothing of the head's process group is left.

Prints one JSON line and writes it to ``bench/results/ray_process_costs.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from bench import RESULTS

BLOCKED = "import sys; sys.modules['rfc3987_syntax'] = None; import ray"
PLAIN = "import ray"


def _seconds(python: str, code: str) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - started


def _live_members(pgid: int) -> list[str]:
    """Command names of the process group's members that are not zombies."""
    out = subprocess.run(["ps", "-eo", "pgid=,stat=,comm="], capture_output=True, text=True).stdout
    return [f[2] for f in (line.split(None, 2) for line in out.splitlines())
            if len(f) == 3 and f[0] == str(pgid) and not f[1].startswith("Z")]


def _shutdown_seconds(grace: float) -> float:
    """Start the embedded local cluster in a private temp dir, time its shutdown, check the group is gone."""
    import shutil
    import tempfile

    from skyrl_nb.cluster.local import local

    base = tempfile.mkdtemp(prefix="rpc-", dir="/tmp")
    cluster = local(num_cpus=2, temp_dir=f"{base}/ray", token_path=f"{base}/token")
    try:
        started = time.perf_counter()
        cluster.shutdown(grace=grace)
        seconds = time.perf_counter() - started
        deadline = time.time() + 10  # a killed daemon may take a moment to go; zombies do not count
        while (alive := _live_members(cluster.pid)) and time.time() < deadline:
            time.sleep(0.5)
        if alive:
            raise RuntimeError(f"processes of the head's group outlived shutdown(grace={grace}): {alive}")
        return seconds
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose ray is measured")
    parser.add_argument("--shutdown", action="store_true", help="also time LocalCluster.shutdown, 15 s vs 3 s grace")
    args = parser.parse_args(argv)
    has_rfc = subprocess.run([args.python, "-c", "import rfc3987_syntax"], capture_output=True).returncode == 0
    jsonschema = subprocess.run([args.python, "-c", "import jsonschema; print(jsonschema.__file__)"],
                                capture_output=True, text=True).stdout.strip()
    _seconds(args.python, PLAIN)  # warm the page cache
    plain, blocked = [], []
    for _ in range(args.reps):
        plain.append(_seconds(args.python, PLAIN))
        blocked.append(_seconds(args.python, BLOCKED))
    result = {
        "python": args.python,
        "jsonschema_from": jsonschema,
        "rfc3987_syntax_installed": has_rfc,
        "reps": args.reps,
        "import_ray_s_median": round(statistics.median(plain), 2),
        "import_ray_without_rfc3987_syntax_s_median": round(statistics.median(blocked), 2),
        "ratio": round(statistics.median(plain) / statistics.median(blocked), 2),
    }
    if args.shutdown:
        old, new = _shutdown_seconds(15.0), _shutdown_seconds(3.0)
        result.update(shutdown_grace15_s=round(old, 1), shutdown_grace3_s=round(new, 1),
                      shutdown_ratio=round(old / new, 1))
    print(json.dumps(result))
    out = RESULTS / "ray_process_costs.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
