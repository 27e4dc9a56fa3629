"""A workspace with two queued chains (baseline, token-clip), built once per module and copied per
test: the error-path tests start from a populated store without paying a `queue` each."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import REPO, Workspace


def build_template(tmp_path_factory, name: str) -> Path:
    root = tmp_path_factory.mktemp(name) / "ws"
    root.mkdir()
    shutil.copytree(REPO / "recipes", root / "recipes")
    ws = Workspace(root)
    ws.write_config()
    ws.run("queue", "baseline", "token-clip")
    return root


def copy_of(template: Path, tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    shutil.copytree(template, root)
    return Workspace(root)
