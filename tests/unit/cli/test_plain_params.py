"""opsdctl.cli.plain_params: typer's parameters give the command the same values, and the same
errors, with the pydantic adapters skipped for plain values as with typer's own coercion."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import pytest
import typer
from typer.testing import CliRunner

from opsdctl.cli import plain_params


class Colour(str, Enum):
    red = "red"
    blue = "blue"


def _app(seen: list) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def cmd(names: Optional[List[str]] = typer.Argument(None),
            text: Optional[str] = typer.Option(None, "--text"),
            count: int = typer.Option(3, "--count"),
            bounded: int = typer.Option(2, "--bounded", min=1, max=5),
            clamped: float = typer.Option(0.0, "--clamped", min=-1.0, max=1.0, clamp=True),
            ratio: float = typer.Option(0.5, "--ratio"),
            flag: bool = typer.Option(False, "--flag"),
            path: Optional[Path] = typer.Option(None, "--path"),
            paths: Optional[List[Path]] = typer.Option(None, "--paths"),
            existing: Optional[Path] = typer.Option(None, "--existing", exists=True),
            colour: Colour = typer.Option(Colour.red, "--colour")) -> None:
        seen.append((names, text, count, bounded, clamped, ratio, flag, path, paths, existing, colour))

    return app


ARGS = [
    [], ["a", "b"], ["--text", "x y"], ["--text", ""], ["--count", "7"], ["--count", "07"], ["--count", " 8 "],
    ["--count", "x"], ["--count", "1.5"], ["--bounded", "9"], ["--bounded", "0"], ["--bounded", "5"], ["--clamped", "3"], ["--clamped", "-0.5"], ["--ratio", "1e-3"], ["--ratio", "nan"], ["--flag"],
    ["--path", "a/b.png"], ["--path", ""], ["--paths", "p", "--paths", "q"], ["--existing", "/nonexistent/x"],
    ["--existing", "/"], ["--colour", "blue"], ["--colour", "green"],
]


def _run(app, args):
    seen: list = []
    res = CliRunner().invoke(app(seen), args)
    return res.exit_code, res.output, seen


@pytest.mark.parametrize("args", ARGS, ids=lambda a: " ".join(a) or "defaults")
def test_same_values_and_errors_as_typers_own(args, monkeypatch):
    assert plain_params.install()
    ours = _run(_app, args)
    monkeypatch.setattr(typer.core._TyperParameter, "get_runtime_param",
                        typer.core._TyperParameter._opsdctl_typer_get)
    theirs = _run(_app, args)
    assert ours[0] == theirs[0] and ours[1] == theirs[1]
    assert repr(ours[2]) == repr(theirs[2])  # types too: Path, list, int, the Enum member


def test_plain_values_skip_the_adapters():
    assert plain_params.install()
    import typer._coercion as coercion

    class Info:
        parser = click_type = min = max = path_type = None

    class Desc:
        parameter_info, file_annotation = Info(), None

        def __init__(self, ann):
            self.annotation = ann

    plain = [str, bool, int, float, Path, List[str], List[Path]]
    assert all(plain_params.plain_descriptor(Desc(a)) for a in plain)
    assert not any(plain_params.plain_descriptor(Desc(a)) for a in (Colour, List[Colour], tuple))
    parsed = Desc(str)
    parsed.parameter_info = Info()
    parsed.parameter_info.parser = str.upper
    assert not plain_params.plain_descriptor(parsed)
    assert hasattr(coercion, "RuntimeParam")


def test_a_runtime_param_that_changed_shape_is_left_to_typer():
    from dataclasses import dataclass

    @dataclass
    class Unfrozen:  # typer's RuntimeParam is a frozen dataclass; were it not, install would back off
        annotation: object = None

    with pytest.raises(TypeError):
        plain_params._plain_class(Unfrozen, None, None)
