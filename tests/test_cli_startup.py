"""Start-up mistakes as a user makes them: `ctxopt` run as a process, each
answered in one line of its own words that names the setting, exit status 2,
no traceback, no gRPC log line, and nothing created or bound."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CTXOPT = str(Path(sys.executable).parent / "ctxopt")
TIMEOUT_S = 60
OPENSSL_SELF_SIGNED = [
    "openssl",
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "1",
    "-subj",
    "/CN=localhost",
]


def ctxopt(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CTXOPT_", "GRPC_"))}
    return subprocess.run(
        [CTXOPT, *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def one_line_error(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("ctxopt: "), lines[0]
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--addr", "127.0.0.1:99999"], {}, "--addr: port 99999 is above 65535"),
        (["--addr", "127.0.0.1"], {}, "--addr: no port: expected HOST:PORT"),
        (["--addr", ":50051"], {}, "--addr: no host"),
        (["--addr", "127.0.0.1:http"], {}, "--addr: the port must be a number from 0 to 65535"),
        ([], {"CTXOPT_ADDR": "garbage"}, "CTXOPT_ADDR: no port: expected HOST:PORT"),
        (["--mcp-addr", "127.0.0.1:70000"], {}, "--mcp-addr: port 70000 is above 65535"),
        (["--gateway-addr", "127.0.0.1:70000"], {}, "--gateway-addr: port 70000 is above 65535"),
        ([], {"CTXOPT_GATEWAY_ADDR": "garbage"}, "CTXOPT_GATEWAY_ADDR: no port"),
        ([], {"CTXOPT_WORKERS": "x"}, "CTXOPT_WORKERS: expected a whole number (got 'x')"),
        ([], {"CTXOPT_WORKERS": "0"}, "CTXOPT_WORKERS: must be at least 1"),
        ([], {"CTXOPT_GRACE_SECONDS": "soon"}, "CTXOPT_GRACE_SECONDS: expected a number"),
        ([], {"CTXOPT_INSECURE": "maybe"}, "CTXOPT_INSECURE: expected true or false"),
        ([], {"CTXOPT_LOG_FORMAT": "xml"}, "CTXOPT_LOG_FORMAT: expected one of json, text"),
        ([], {"CTXOPT_FSYNC": "sometimes"}, "CTXOPT_FSYNC: expected one of full, normal"),
        (["--workers", "0"], {"CTXOPT_WORKERS": "4"}, "--workers: must be at least 1"),
        (
            [],
            {"CTXOPT_GATEWAY_RECENT_TURNS": "-1"},
            "CTXOPT_GATEWAY_RECENT_TURNS: must be at least 0",
        ),
        (
            [],
            {"CTXOPT_GATEWAY_RECENT_SHARE": "1.5"},
            "CTXOPT_GATEWAY_RECENT_SHARE: must be at most 1",
        ),
        (
            [],
            {"CTXOPT_GATEWAY_TRIGGER_PERCENT": "0"},
            "CTXOPT_GATEWAY_TRIGGER_PERCENT: must be at least 1",
        ),
        (
            [],
            {"CTXOPT_GATEWAY_TRIGGER_PERCENT": "50", "CTXOPT_GATEWAY_LANDING_PERCENT": "60"},
            "CTXOPT_GATEWAY_LANDING_PERCENT: must not be above CTXOPT_GATEWAY_TRIGGER_PERCENT",
        ),
        (
            ["--gateway-full-landing-percent", "40"],
            {},
            "--gateway-full-landing-percent: must not be above CTXOPT_GATEWAY_LANDING_PERCENT",
        ),
    ],
)
def test_a_bad_setting_is_named_and_nothing_is_created(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    data = tmp_path / "data"
    run = ctxopt("serve", "--data-dir", str(data), *args, cwd=tmp_path, env=env)
    assert expected in one_line_error(run)
    assert not data.exists()


def test_a_port_in_use_is_said_in_our_words(tmp_path: Path, busy_port: int) -> None:
    run = ctxopt("serve", "--addr", f"127.0.0.1:{busy_port}", "--data-dir", "d", cwd=tmp_path)
    line = one_line_error(run)
    assert "--addr: address already in use" in line and str(busy_port) in line
    assert "GRPC" not in run.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("flag", ["--mcp-addr", "--gateway-addr"])
def test_a_second_listeners_port_in_use_is_named_too(
    tmp_path: Path, busy_port: int, flag: str
) -> None:
    run = ctxopt("serve", "--addr", "127.0.0.1:0", flag, f"127.0.0.1:{busy_port}", cwd=tmp_path)
    assert f"{flag}: address already in use" in one_line_error(run)


def test_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("not a directory")
    run = ctxopt("serve", "--addr", "127.0.0.1:0", "--data-dir", "notes", cwd=tmp_path)
    assert "--data-dir: is a file, not a directory (got 'notes')" in one_line_error(run)
    below = ctxopt("serve", "--addr", "127.0.0.1:0", "--data-dir", "notes/db", cwd=tmp_path)
    assert "notes is a file, not a directory" in one_line_error(below)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(
        [*OPENSSL_SELF_SIGNED, "-keyout", str(key), "-out", str(cert)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    ssl.create_default_context(cafile=str(cert))  # a real certificate
    return cert, key


def test_tls_file_problems_are_named(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    (tmp_path / "bad.pem").write_text("-----BEGIN NOTHING-----\n")
    serve = ["serve", "--addr", "127.0.0.1:0", "--data-dir", "d"]
    cases = {
        ("--tls-cert", str(cert), "--tls-key", "missing.pem"): "--tls-key: no such file",
        ("--tls-cert", str(cert), "--tls-key", "bad.pem"): "--tls-key: not a PEM private key",
        ("--tls-cert", "bad.pem", "--tls-key", str(key)): "--tls-cert: not a PEM certificate",
        ("--tls-cert", str(cert)): "TLS needs both a certificate and a key: give --tls-key too",
    }
    for flags, expected in cases.items():
        run = ctxopt(*serve, *flags, cwd=tmp_path)
        assert expected in one_line_error(run), flags
        assert "E0000" not in run.stderr and "GRPC" not in run.stderr
    assert not (tmp_path / "d").exists()


def test_an_unknown_flag_under_serve_shows_serves_usage(tmp_path: Path) -> None:
    run = ctxopt("serve", "--bogus", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.startswith("usage: ctxopt serve ")
    assert "ctxopt serve: error: unrecognized arguments: --bogus" in run.stderr
    restore = ctxopt("stash", "restore", "s", "c1", "--bogus", cwd=tmp_path)
    assert restore.stderr.startswith("usage: ctxopt stash restore ")


def test_a_failed_import_creates_no_data_directory(tmp_path: Path) -> None:
    run = ctxopt("import", "missing.json", "--data-dir", "d3", cwd=tmp_path)
    assert "file: no such file (got 'missing.json')" in one_line_error(run)
    assert not (tmp_path / "d3").exists()
    (tmp_path / "broken.json").write_text("{not json")
    broken = ctxopt("import", "broken.json", "--data-dir", "d4", cwd=tmp_path)
    one_line_error(broken)
    assert not (tmp_path / "d4").exists()


def test_an_export_from_nowhere_creates_nothing(tmp_path: Path) -> None:
    run = ctxopt("export", "s", "--data-dir", "d5", "-o", "s.json", cwd=tmp_path)
    assert "data_dir: holds no ctxopt store" in one_line_error(run)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_version_starts_nothing(tmp_path: Path) -> None:
    from ctxopt import __version__

    run = ctxopt("--version", cwd=tmp_path)
    assert run.returncode == 0
    assert run.stdout == f"ctxopt {__version__}\n"
    assert __version__ != "0+unknown"


def test_errors_come_before_the_slow_imports(tmp_path: Path) -> None:
    probe = (
        "import sys; from ctxopt.cli import main; "
        "code = main(['serve', '--addr', '127.0.0.1:99999', '--data-dir', 'd']); "
        "print(code, sorted(m for m in ('grpc', 'numpy', 'ctxopt.engine') if m in sys.modules))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert run.stdout == "2 []\n", run.stderr
    assert "--addr: port 99999 is above 65535" in run.stderr
