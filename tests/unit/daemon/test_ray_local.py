"""The local Ray's token file and temp dir (opsdctl/daemon/ray_local.py), without starting Ray:
the worker's own Ray is checked end to end in tests/integration/test_ray_loopback.py."""

from __future__ import annotations

import os
import stat

import pytest

from opsdctl.daemon import ray_local


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_token_is_made_0600_in_a_0700_dir_whatever_the_umask(home):
    old = os.umask(0)  # the loosest umask: the modes must not come from it
    try:
        path = ray_local.private_token()
    finally:
        os.umask(old)
    assert path == home / ".ray" / "auth_token" and len(path.read_text()) == 64
    assert mode(path) == 0o600 and mode(path.parent) == 0o700


def test_a_token_ray_left_readable_is_kept_and_made_private(home):
    (home / ".ray").mkdir(mode=0o755)
    os.chmod(home / ".ray", 0o755)
    (home / ".ray" / "auth_token").write_text("abc")
    os.chmod(home / ".ray" / "auth_token", 0o644)
    path = ray_local.private_token()
    assert path.read_text() == "abc" and mode(path) == 0o600 and mode(path.parent) == 0o700


@pytest.mark.parametrize("var, value", [("RAY_AUTH_MODE", "disabled"), ("RAY_AUTH_TOKEN", "t"),
                                        ("RAY_AUTH_TOKEN_PATH", "/elsewhere/token")])
def test_no_file_when_ray_reads_none_from_its_default_place(home, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    assert ray_local.private_token() is None and not (home / ".ray").exists()


def test_the_temp_dir_is_a_fresh_0700_one_under_ray_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    registered = []
    monkeypatch.setattr(ray_local.atexit, "register", lambda fn, *a: registered.append((fn, a)))
    old = os.umask(0)
    try:
        ray_dir = ray_local.private_temp_dir()
    finally:
        os.umask(old)
    private = ray_dir.parent
    assert private.parent == tmp_path and private.name.startswith(ray_local.TEMP_PREFIX)
    assert mode(private) == 0o700 and not ray_dir.exists()  # Ray makes its own (0777) inside
    assert registered == [(ray_local._remove, (private,))]  # removed at exit
