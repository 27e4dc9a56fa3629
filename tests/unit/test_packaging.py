"""pyproject.toml asks only for extras its dependencies really provide.

pip warns `math-verify 0.9.0 does not provide the extra 'antlr4_13_2'` when a requirement names
an extra the installed distribution does not list: the README's install commands must run
without warnings about our own metadata. The check compares the extra as written with the
installed distribution's `Provides-Extra` fields, exactly as the pip of a fresh venv does.
"""

from __future__ import annotations

import importlib.metadata as md

from conftest import REPO as ROOT
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.10
    import tomli as tomllib



def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        reqs += group
    return [Requirement(r) for r in reqs]


def test_every_requested_extra_is_provided_by_the_installed_distribution():
    checked = 0
    for req in _requirements():
        if not req.extras or (req.marker is not None and not req.marker.evaluate()):
            continue
        try:
            provided = set(md.metadata(req.name).get_all("Provides-Extra") or [])
        except md.PackageNotFoundError:
            continue  # an optional group not installed here (e.g. vllm)
        missing = sorted(req.extras - provided)
        assert not missing, f"{req}: {req.name} {md.version(req.name)} provides {sorted(provided)}, not {missing}"
        checked += 1
    assert checked, "no requirement with extras was checked (math-verify is a core dependency)"
