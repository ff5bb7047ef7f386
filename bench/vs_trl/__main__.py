"""``python -m bench.vs_trl`` (or ``python -m bench vs_trl``): see :mod:`bench.vs_trl`."""

from bench.vs_trl import main

if __name__ == "__main__":
    raise SystemExit(main())
