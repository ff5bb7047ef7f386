"""``python -m bench``: list the studies; ``python -m bench NAME [ARGS]``: run one; ``python -m bench quick``:
the quick set (``make bench``), each with its default arguments, results under ``bench/results/``."""

from __future__ import annotations

import importlib
import shlex
import sys
import time

from bench import STUDIES, study


def _run(name: str, argv: list[str]) -> int:
    module = importlib.import_module(f"bench.{name}")
    sys.argv = [f"python -m bench {name}", *argv]
    return int(module.main(argv) or 0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(len(s.name) for s in STUDIES)
        print("studies (python -m bench NAME --help for each one's options; `quick` runs the ones marked *):")
        for s in STUDIES:
            mark = "*" if s.quick else " "
            print(f" {mark} {s.name:<{width}}  {s.question}" + (f"  [goal: {s.goal}]" if s.goal else ""))
        return 0
    if argv[0] == "quick":
        failed = []
        for s in STUDIES:
            if not s.quick:
                continue
            started = time.perf_counter()
            print(f"bench quick: {s.name} ...", flush=True)
            code = _run(s.name, shlex.split(s.args))
            print(f"bench quick: {s.name} exit {code} in {time.perf_counter() - started:.0f} s", flush=True)
            if code:
                failed.append(s.name)
        return 1 if failed else 0
    try:
        study(argv[0])
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    return _run(argv[0], argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
