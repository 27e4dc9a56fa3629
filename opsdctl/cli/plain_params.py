"""Typer's option coercion without pydantic for the plain values the commands' options carry.

Typer 0.2x coerces every parameter's value, defaults included, through a pydantic TypeAdapter
built on first use, so every command with an option imports pydantic (about 60 ms) and builds
adapters (20 ms more): an eighth of what `compare` or `status` may take in all. Here a value the
adapter would return unchanged skips it: a str that is a str, a bool that is a bool, an int or a
float that is one (inside its bounds), a path option's string (made a Path as pydantic makes it, then
checked by typer's own path rule), and lists of those. Anything else (a string for a number, a
number outside its bounds, an Enum, a parser, a file) goes to typer's own adapter, built when
first needed, so its values and errors are typer's. On a typer without this seam (typer._coercion's
RuntimeParam, _TyperParameter.get_runtime_param) `install()` does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, get_args, get_origin

_PLAIN = (str, bool, int, float, Path)


def _leaf_ok(ann: Any, info: Any) -> bool:
    if ann not in _PLAIN:
        return False
    if ann is Path:
        return info.path_type is None
    return True


def plain_descriptor(descriptor: Any) -> bool:
    """Whether a parameter of this typer type descriptor can skip the adapter for plain values."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None or getattr(info, "click_type", None) is not None:
        return False
    ann = descriptor.annotation
    if get_origin(ann) in (list, List):
        args = get_args(ann)
        return len(args) == 1 and _leaf_ok(args[0], info)
    return _leaf_ok(ann, info)


def _plain_class(base, build, coerce_cli_path):
    """typer's RuntimeParam for the plain values (see the module docstring); typer's own for the rest."""
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):
        descriptor: Any = None
        _typer: dict = field(default_factory=dict)  # typer's own RuntimeParam, built on first need

        def _fallback(self, value, param, ctx):
            if "rp" not in self._typer:
                self._typer["rp"] = build(self.descriptor)
            return self._typer["rp"]._coerce_value(value, param=param, ctx=ctx)

        def _leaf(self, ann, item, param, ctx):
            if ann is bool:
                ok = isinstance(item, bool)
            elif ann in (int, float):  # inside its bounds (a bound or a clamp acts only outside)
                lo, hi = self.parameter_info.min, self.parameter_info.max
                ok = type(item) is ann and (lo is None or item >= lo) and (hi is None or item <= hi)
            else:
                ok = isinstance(item, str)
            if not ok:
                raise TypeError
            if ann is Path:
                return coerce_cli_path(Path(item), self.parameter_info, path_type=Path, param=param, ctx=ctx)
            return item

        def _coerce_value(self, value, param, ctx):
            ann = self.annotation
            try:
                if get_origin(ann) in (list, List):
                    if not isinstance(value, (list, tuple)):
                        raise TypeError
                    leaf = get_args(ann)[0]
                    return [self._leaf(leaf, item, param, ctx) for item in value]
                return self._leaf(ann, value, param, ctx)
            except TypeError:
                return self._fallback(value, param, ctx)

    return PlainRuntimeParam


def install() -> bool:
    """Route typer's plain parameters around pydantic (True when typer has the seam)."""
    try:
        from typer import _coercion, core
        from typer._param_types import coerce_cli_path
    except ImportError:
        return False
    param_cls, base = getattr(core, "_TyperParameter", None), getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if param_cls is None or base is None or build is None or not hasattr(param_cls, "get_runtime_param"):
        return False
    if getattr(param_cls, "_opsdctl_plain", False):
        return True

    try:
        plain_cls = _plain_class(base, build, coerce_cli_path)
    except (TypeError, ValueError, AttributeError):  # a RuntimeParam that is no longer a dataclass
        return False

    typer_get = param_cls.get_runtime_param

    def get_runtime_param(self):
        if self._runtime_param is None:
            try:  # a typer whose seam has moved on gets its own coercion, never an error of ours
                d = self.type_descriptor
                if plain_descriptor(d):
                    self._runtime_param = plain_cls(parameter_info=d.parameter_info, annotation=d.annotation,
                                                    descriptor=d)
            except (AttributeError, TypeError):
                pass
        return typer_get(self)

    param_cls.get_runtime_param = get_runtime_param
    param_cls._opsdctl_plain = True
    param_cls._opsdctl_typer_get = typer_get  # typer's own, for the tests that compare the two
    return True
