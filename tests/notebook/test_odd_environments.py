"""Odd environments: a read-only HOME, a 125-byte TMPDIR, a TMPDIR that does not exist.

Each either works or fails at once in one line naming the path and the setting that moves it. The
read-only HOME is a real read-only mount (a private mount namespace, `unshare -m`), each case a fresh
interpreter, timed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SETTINGS = ("SKYRL_NB_CONFIG_DIR", "SKYRL_NB_CACHE_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "RAY_ADDRESS",
            "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "TMPDIR")


def _can_mount_read_only() -> bool:
    if not shutil.which("unshare"):
        return False
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro,size=16k tmpfs {d}"],
                               capture_output=True, timeout=10)
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(not _can_mount_read_only(), reason="no private mount namespace (unshare -m)")


def _run(code: str, env: dict[str, str], read_only: Path | None = None, timeout: float = 60) -> tuple[int, str, float]:
    """Run `code` in a fresh interpreter with `env` (HOME read-only when `read_only`): rc, stderr, seconds."""
    full = {k: v for k, v in os.environ.items() if k not in SETTINGS} | env
    cmd = [sys.executable, "-c", code]
    if read_only is not None:
        # the folder becomes a read-only tmpfs in a mount namespace of this command alone
        cmd = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o ro,size=16k tmpfs "{read_only}" && exec "$@"',
               "sh", *cmd]
    started = time.monotonic()
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stderr + out.stdout, time.monotonic() - started


def _last_line(text: str) -> str:
    return [ln for ln in text.strip().splitlines() if ln.strip()][-1]


START = "import skyrl_nb; c = skyrl_nb.cluster.local(num_cpus=1, progress=False, timeout=150)\n"


@needs_mount
def test_read_only_home_is_one_line_naming_the_path_and_the_setting(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    rc, said, seconds = _run(START, {"HOME": str(home)}, read_only=home)
    line = _last_line(said)
    assert rc != 0 and seconds < 10, (rc, seconds, said[-2000:])
    assert line.startswith("OSError: ") and f"'{home}/.config/skyrl-nb'" in line and "SKYRL_NB_CONFIG_DIR" in line
    assert "Read-only file system" in line and "During handling" not in said  # one error, not a chain

    # with the config dir moved, the next folder under HOME is named with its own setting
    rc, said, seconds = _run(START, {"HOME": str(home), "SKYRL_NB_CONFIG_DIR": str(tmp_path / "cfg")},
                             read_only=home)
    line = _last_line(said)
    assert rc != 0 and seconds < 10, (rc, seconds, said[-2000:])
    assert f"'{home}/.cache/skyrl-nb/ray'" in line and "SKYRL_NB_CACHE_DIR" in line

    # `%skyrl launch` says the same in its one-line usage error
    rc, said, seconds = _run(MAGIC_LAUNCH.format(root=tmp_path / "runs"), {"HOME": str(home)}, read_only=home)
    assert rc == 0 and seconds < 10, (rc, seconds, said[-2000:])
    assert "UsageError: %skyrl launch: skyrl-nb's config dir" in said and "SKYRL_NB_CONFIG_DIR" in said, said
    assert "Traceback" not in said


MAGIC_LAUNCH = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "skyrl_nb")
shell.run_line_magic("config", "SkyrlMagics.show_dashboard = False")
shell.run_cell("%skyrl launch trainer.max_training_steps=2 run.run_root={root}")
"""


FORKSERVER = """
import multiprocessing as mp, os
ctx = mp.get_context("forkserver")
p = ctx.Process(target=os.getpid)
p.start(); p.join(30)
print("forkserver ok", p.exitcode)
"""


def test_a_tmpdir_ray_cannot_use_is_swapped_for_a_short_one(tmp_path: Path) -> None:
    from skyrl_nb.cluster.local import process_tmpdir

    long_tmp = Path("/tmp") / ("t" * 120)  # 125 bytes, as the probe found
    long_tmp.mkdir(exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix="snb-", dir="/tmp"))
    try:
        assert len(os.fsencode(long_tmp)) == 125
        # Ray's dashboard starts a multiprocessing forkserver under $TMPDIR: at 125 bytes it fails
        rc, said, _ = _run(FORKSERVER, {"TMPDIR": str(long_tmp)})
        assert rc != 0 and "AF_UNIX path too long" in said, said[-2000:]
        # what a head started from that environment gives its processes instead
        swapped = process_tmpdir(short, str(long_tmp))
        assert swapped == str(short)
        rc, said, _ = _run(FORKSERVER, {"TMPDIR": swapped})
        assert rc == 0 and "forkserver ok 0" in said, said[-2000:]
        # a TMPDIR that does not exist, or one we cannot write, is swapped too; a usable one is kept
        assert process_tmpdir(short, str(tmp_path / "missing")) == str(short)
        assert process_tmpdir(short, str(tmp_path)) is None
        assert process_tmpdir(short, "") is None
    finally:
        shutil.rmtree(short, ignore_errors=True)
        shutil.rmtree(long_tmp, ignore_errors=True)


START_AND_STOP = START + "assert c.client.list_jobs() == []; c.shutdown(); print('head up and down')\n"


@pytest.mark.slow
@needs_mount
def test_head_starts_with_read_only_home_and_a_long_or_missing_tmpdir(tmp_path: Path) -> None:
    # Once the settings move skyrl-nb's folders off the read-only HOME, a real head comes up with the
    # probe's 125-byte TMPDIR (it used to hang 300 s) and with a TMPDIR that does not exist.
    home, long_tmp = tmp_path / "home", Path("/tmp") / ("u" * 120)
    home.mkdir()
    long_tmp.mkdir(exist_ok=True)
    dirs = Path(tempfile.mkdtemp(prefix="snb-", dir="/tmp"))
    try:
        for tmpdir in (long_tmp, tmp_path / "no-such-dir"):
            env = {"HOME": str(home), "SKYRL_NB_CONFIG_DIR": str(dirs / "c"), "SKYRL_NB_CACHE_DIR": str(dirs / "k"),
                   "TMPDIR": str(tmpdir)}
            rc, said, seconds = _run(START_AND_STOP, env, read_only=home, timeout=180)
            print(f"\nhead up and down, read-only HOME, TMPDIR of {len(str(tmpdir))} bytes"
                  f" ({'exists' if tmpdir.exists() else 'missing'}): {seconds:.1f} s")
            assert rc == 0 and "head up and down" in said, said[-3000:]
    finally:
        shutil.rmtree(long_tmp, ignore_errors=True)
        shutil.rmtree(dirs, ignore_errors=True)
