"""Fixtures for the real-browser tests: a headless JupyterLab (or Notebook 7) and Debian's Chromium.

The browser is never downloaded: Playwright drives ``/usr/bin/chromium`` (``apt-get install
chromium``), with a fresh profile. JupyterLab listens on 127.0.0.1 on a free port with a token,
in a temporary directory, and is stopped at the end even when the test fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

CHROMIUM = "/usr/bin/chromium"
REPO = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A running Jupyter server: ``url``, ``token``, ``root`` (its directory) and its log."""

    def __init__(self, proc, url, token, root, log_path):
        self.proc, self.url, self.token, self.root, self.log_path = (
            proc,
            url,
            token,
            root,
            log_path,
        )

    def log_tail(self, n=60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def write_notebook(self, name: str, cells: list[str]) -> pathlib.Path:
        nb = {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"cell{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": src,
                }
                for i, src in enumerate(cells)
            ],
            "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        path = self.root / name
        path.write_text(json.dumps(nb, indent=1))
        return path


def _settings(dirpath: pathlib.Path):
    """JupyterLab user settings: no news or update checks (no toast over the page)."""
    d = dirpath / "@jupyterlab" / "apputils-extension"
    d.mkdir(parents=True)
    (d / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server for this test, stopped (with its kernels) when the test ends."""
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
    yield from _server(
        tmp_path,
        "jupyterlab",
        [
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ],
    )


@pytest.fixture
def notebook7(tmp_path):
    """A Jupyter Notebook 7 server (JupyterLab's components, another application)."""
    pytest.importorskip("notebook", reason="notebook (Jupyter Notebook 7) is not installed")
    yield from _server(tmp_path, "notebook", ["--JupyterNotebookApp.expose_app_in_browser=True"])


def _server(tmp_path, module: str, app_args: list[str]):
    root = tmp_path / "lab"
    root.mkdir()
    for d in ("config", "data", "runtime", "settings", "workspaces"):
        (tmp_path / d).mkdir()
    _settings(tmp_path / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        JUPYTER_PLATFORM_DIRS="1",
    )
    log_path = tmp_path / f"{module}.log"
    cmd = [
        sys.executable,
        "-m",
        module,
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        *app_args,
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI often run as root
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    server = Lab(proc, url, token, root, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{module} exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{module} did not start in 60 s:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        _stop(proc)


def _stop(proc):
    """Stop the server (SIGTERM shuts its kernels down), then anything left in its group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # leftover kernels of this server's group
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture
def page(tmp_path):
    """A Playwright page in Debian's headless Chromium with a fresh profile (never downloaded)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium to run the browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1360, "height": 1000},
            device_scale_factor=1,
        )
        try:
            pg = context.pages[0] if context.pages else context.new_page()
            pg.errors = []
            pg.on("pageerror", lambda e: pg.errors.append(str(e)))
            pg.on(
                "console",
                lambda m: pg.errors.append(m.text) if m.type == "error" else None,
            )
            yield pg
        finally:
            context.close()
