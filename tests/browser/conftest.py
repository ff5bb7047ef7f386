"""A real JupyterLab and a headless Debian chromium driven by playwright, for the browser tests.

Everything is isolated: HOME, JUPYTER_* and IPYTHONDIR point into a temp dir; the only kernel is a
kernelspec for this interpreter (the project's .venv); the server listens on a free loopback port with
a token. Recipe and flags from ../shared/MACHINE-NOTES.md ("Jupyter and a real browser").
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    # keep the page's timers and rendering running at full rate while the test only waits
    "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab: where it listens, its token, and the folder it serves."""

    url: str
    token: str
    root_dir: Path
    env: dict[str, str]

    def api(self, path: str, method: str = "GET") -> object:
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def notebook_url(self, name: str) -> str:
        # `reset`: a fresh workspace, so a notebook an earlier test opened is not restored next to it
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium; installed here when missing and we are root, else the tests skip."""
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            pytest.skip("/usr/bin/chromium is missing and this is not root, so it cannot be apt-installed "
                        "(run scripts/install-browser.sh as root)")
        subprocess.run(["bash", str(ROOT / "scripts" / "install-browser.sh")], check=True, timeout=600)
    if not CHROMIUM.exists():
        pytest.fail("scripts/install-browser.sh ran but /usr/bin/chromium is still missing")
    pytest.importorskip("playwright", reason="the dev extra's playwright package is not installed")
    return CHROMIUM


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory, chromium: Path) -> Iterator[Lab]:
    """JupyterLab on a free loopback port, isolated HOME / JUPYTER_* / IPYTHONDIR, this venv's kernel."""
    base = tmp_path_factory.mktemp("lab")
    home, work = base / "home", base / "work"
    data_dir, settings = base / "jupyter-data", base / "app-settings"
    for d in (home, work, data_dir / "kernels" / "python3", settings):
        d.mkdir(parents=True)
    # the one kernel: this interpreter (the project's .venv), whatever the machine has elsewhere
    (data_dir / "kernels" / "python3" / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (skyrl-nb .venv)", "language": "python"}))
    # no news / update pop-ups over the notebook
    (settings / "overrides.json").write_text(json.dumps({
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}))
    # skyrl-nb's Ray temp dir and token: private and short (Ray's socket paths must stay < 108 chars)
    nb_home = Path(tempfile.mkdtemp(prefix="snb-lab-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "SKYRL_NB_"))}
    env.update(SKYRL_NB_CACHE_DIR=str(nb_home / "cache"), SKYRL_NB_CONFIG_DIR=str(nb_home / "config"))
    # the engine's warm-started tiny model: the machine's cache, not a rebuild under the temp HOME
    env["SKYRL_NB_CACHE"] = os.environ.get("SKYRL_NB_CACHE") or str(Path.home() / ".cache" / "skyrl-nb")
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(base / "jupyter-config"), JUPYTER_DATA_DIR=str(data_dir),
               JUPYTER_RUNTIME_DIR=str(base / "jupyter-runtime"), IPYTHONDIR=str(base / "ipython"),
               JUPYTERLAB_SETTINGS_DIR=str(base / "lab-user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(base / "lab-workspaces"), JUPYTER_PREFER_ENV_PATH="0",
               PYTHONUNBUFFERED="1")
    port, token = _free_port(), secrets.token_hex(16)
    log = (base / "jupyter.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
         "--port", str(port), "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.app_settings_dir={settings}", "--ServerApp.open_browser=False"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Lab(url=f"http://127.0.0.1:{port}", token=token, root_dir=work, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            server.api("/api/status")
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"JupyterLab did not start: {(base / 'jupyter.log').read_text()[-3000:]}")
            time.sleep(0.5)
    try:
        yield server
    finally:
        try:
            for kernel in server.api("/api/kernels") or []:  # type: ignore[union-attr]
                server.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        except Exception:
            pass
        _stop_ray_head(nb_home)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.copy(base / "jupyter.log", _artifacts() / "jupyter.log")
        shutil.rmtree(nb_home, ignore_errors=True)


def _stop_ray_head(nb_home: Path) -> None:
    """Stop the local Ray head a notebook started under `nb_home` (only that one), if it still runs."""
    from skyrl_nb.cluster.local import local

    try:
        cluster = local(start=False, temp_dir=nb_home / "cache" / "ray", token_path=nb_home / "config" / "ray_token")
        if cluster is not None:
            cluster.shutdown()
    except Exception as exc:  # teardown: report, do not mask the test's own result
        print(f"could not stop the notebook's Ray head under {nb_home}: {exc}", file=sys.stderr)


def _artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """The git-ignored folder screenshots go to (artifacts/browser/)."""
    return _artifacts()


@pytest.fixture(scope="session")
def browser(chromium: Path):
    """Headless Debian chromium through playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    # playwright gives every launch a fresh temporary --user-data-dir (and refuses one in args)
    browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True)
    try:
        yield browser
    finally:
        browser.close()
        pw.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def page(browser, request):
    """A fresh browser context (its own profile) and page, 1500x1000; a screenshot when the test fails."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            name = request.node.name
            try:
                page.screenshot(path=str(_artifacts() / f"FAILED-{name}.png"), full_page=True)
            except Exception:
                pass
            try:
                outputs = "\n---\n".join(page.locator(".jp-OutputArea").all_inner_texts())
            except Exception:
                outputs = ""
            (_artifacts() / f"FAILED-{name}.console.txt").write_text(
                "\n".join(console) + "\n\n=== cell outputs ===\n" + outputs)
        context.close()
