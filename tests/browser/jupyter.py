"""A JupyterLab server on loopback for browser tests, and Debian's Chromium driven by Playwright.

The server runs from this venv on 127.0.0.1, a free port and a random token, with its own config,
settings and workspace directories (nothing of the user's is read or written) and no news or update
checks. It is stopped by pid: SIGTERM (the server shuts its kernels down), SIGKILL after a grace period.

Examples
--------
>>> with JupyterServer(tmp_path) as server:                        # doctest: +SKIP
...     page.goto(server.url("lab/tree/widgets.ipynb"))
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
# What the issue prescribes for Debian's Chromium in a container: no sandbox, GPU or network side traffic.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Render every cell (a windowed notebook leaves cells out of view out of the DOM), start the notebook's
# kernel without asking, and neither fetch news nor ask whether to.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                   "autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    """``jupyter lab`` serving ``root`` (a temporary directory) until :meth:`stop`.

    Attributes
    ----------
    pid : int
    log : pathlib.Path
        The server's output, to show when a test fails.
    """

    def __init__(self, root: Path, start_timeout: float = 120.0):
        self.root, self.start_timeout = Path(root), start_timeout
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.log = self.root.parent / "jupyter-server.log"
        self.process: subprocess.Popen | None = None

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def __enter__(self) -> JupyterServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> JupyterServer:
        home = self.root.parent / "jupyter-home"
        settings = home / "lab-settings"
        for name, values in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_CONFIG_DIR": str(home / "config"),
               "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
               "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "IPYTHONDIR": str(home / "ipython")}
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
                   "--ServerApp.terminals_enabled=False", "--LabApp.news_url=None",
                   "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                   "--LabApp.extension_manager=readonly"]  # no PyPI queries from the extension manager
        if os.geteuid() == 0:  # CI and this machine's sessions run as root; the server refuses without it
            command.append("--allow-root")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        self._wait_ready()
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}")

    def descendants(self) -> list[int]:
        """pids of the server's process tree (kernels, and what they started), the server first."""
        try:
            server = psutil.Process(self.pid)
            return [self.pid] + [child.pid for child in server.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the server (it shuts its kernels down), SIGKILL it after ``grace`` seconds; idempotent."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def wait_gone(pids, seconds: float) -> list[int]:
    """The pids among ``pids`` still alive (zombies count as gone) after waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def chromium_problem() -> str | None:
    """Why Chromium cannot be used here, or None: missing binary (``scripts/browser_deps.sh`` installs it)."""
    if shutil.which(CHROMIUM) or os.path.exists(CHROMIUM):
        return None
    return f"{CHROMIUM} is missing: run scripts/browser_deps.sh (as root: apt-get install -y chromium)"


@contextlib.contextmanager
def notebook_page(notebook: Path, workdir: Path, viewport: dict):
    """A headless Chromium page on ``notebook`` in JupyterLab, served from a copy in ``workdir`` (the server saves
    outputs into its copy, not ours); yields ``(page, left)``, ``left`` a list for the test to fill with the pids
    its cluster started. On leaving: the browser closed, the server stopped (the tail of its log printed if the
    test failed), and every pid of ``left`` and of the server's children gone within 20 s.

    Examples
    --------
    >>> with notebook_page(NOTEBOOK, tmp_path, {"width": 1400, "height": 1000}) as (page, left):  # doctest: +SKIP
    ...     page.get_by_text("stopped 2 ranks").wait_for()
    """
    from playwright.sync_api import sync_playwright

    work = workdir / "notebooks"
    work.mkdir()
    shutil.copy(notebook, work / notebook.name)
    server = JupyterServer(work).start()
    left: list[int] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport=viewport)
                page.goto(server.url(f"lab/tree/{notebook.name}"))
                yield page, left
            finally:
                browser.close()
        left += server.descendants()
    except BaseException:
        print(server.log_tail())
        raise
    finally:
        server.stop()
    assert wait_gone(left, 20) == [], "the cluster or the Jupyter server left processes behind"
