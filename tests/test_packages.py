"""The packages a user installs, built and installed from scratch: the Python
wheel and sdist (`python -m build`, `twine check`) into a clean virtualenv with
the runtime dependencies only, running `ctxopt serve` and `ctxopt mcp`; the npm
tarball of ts-client installed globally into a temporary prefix, running
`ctxopt-gemini` and `ctxopt-prompt`.

Slow (about a minute: the wheel's dependencies come from the package cache or
the registry, as `make install` gets them); marked `packaging`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from ctxopt import __version__

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TIMEOUT_S = 600
DEV_TOOLS = {
    "pytest",
    "mypy",
    "ruff",
    "hypothesis",
    "matplotlib",
    "grpcio-tools",
    "build",
    "playwright",
}

pytestmark = pytest.mark.packaging


def run(*command: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    return done


def test_the_python_wheel_installs_clean_and_serves(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT)
    wheel = next(dist.glob("ctxopt_server-*.whl"))
    sdist = next(dist.glob("ctxopt_server-*.tar.gz"))
    assert wheel.name == f"ctxopt_server-{__version__}-py3-none-any.whl"
    run(VENV_BIN / "twine", "check", "--strict", wheel, sdist)
    names = zipfile.ZipFile(wheel).namelist()
    assert "ctxopt/cli/commands.py" in names and "ctxopt/engine/engine.py" in names
    assert "ctxopt/v1/ctxopt_pb2.py" in names
    assert {f"ctxopt/api/gateway/ui/{f}" for f in ("index.html", "app.js", "style.css")} <= set(
        names
    ), "the dashboard's files ship in the wheel"
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    with tarfile.open(sdist) as source:
        assert f"ctxopt_server-{__version__}/LICENSE" in source.getnames()

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    run(venv / "bin/python", "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel)
    listed = run(venv / "bin/python", "-m", "pip", "list", "--format", "json").stdout
    installed = {package["name"].lower() for package in json.loads(listed)}
    assert "ctxopt-server" in installed
    assert not installed & DEV_TOOLS, installed & DEV_TOOLS
    ctxopt = venv / "bin/ctxopt"
    assert run(ctxopt, "--version", cwd=tmp_path).stdout == f"ctxopt {__version__}\n"

    server = subprocess.Popen(
        [ctxopt, "serve", "--addr", "127.0.0.1:0", "--data-dir", tmp_path / "data"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("ctxopt listening on 127.0.0.1:")
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert server.returncode == 0

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    mcp = subprocess.run(
        [ctxopt, "mcp", "--data-dir", tmp_path / "mcp-data"],
        input=json.dumps(initialize) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    answer = json.loads(mcp.stdout.splitlines()[0])
    assert answer["result"]["serverInfo"] == {"name": "ctxopt", "version": __version__}


def test_the_npm_tarball_installs_globally_and_runs(tmp_path: Path) -> None:
    client = ROOT / "ts-client"
    packed = run("npm", "pack", "--json", "--pack-destination", tmp_path, cwd=client)
    (report,) = json.loads(packed.stdout[packed.stdout.index("[") :])
    files = {f["path"] for f in report["files"]}
    manifest = json.loads((client / "package.json").read_text())
    for bin_path in manifest["bin"].values():
        assert bin_path in files, bin_path
    assert "LICENSE" in files and "README.md" in files
    assert not [f for f in files if f.startswith(("dist/test/", "dist/bench/", "test/", "bench/"))]
    assert not [
        f for f in files if "results" in f or (f.endswith((".map", ".ts")) and ".d.ts" not in f)
    ]

    prefix = tmp_path / "prefix"
    tarball = tmp_path / report["filename"]
    run(
        "npm", "install", "-g", "--prefix", prefix, "--no-audit", "--no-fund", tarball, cwd=tmp_path
    )
    help_text = run(prefix / "bin/ctxopt-gemini", "--help", cwd=tmp_path).stdout
    assert help_text.startswith("usage: ctxopt-gemini")
    version = run(prefix / "bin/ctxopt-gemini", "--version", cwd=tmp_path).stdout
    assert version == f"ctxopt-gemini {manifest['version']}\n"
    assert run(prefix / "bin/ctxopt-prompt", "--version", cwd=tmp_path).stdout == (
        f"ctxopt-prompt {manifest['version']}\n"
    )
    usage = subprocess.run(
        [prefix / "bin/ctxopt-prompt"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ctxopt-prompt")
    history = client / "examples/agent-session.json"
    passed = run(prefix / "bin/ctxopt-prompt", "--history", history, cwd=tmp_path).stdout
    assert passed.startswith("ctxopt[false] gemini-2.5-pro: ") and "pass-through" in passed
