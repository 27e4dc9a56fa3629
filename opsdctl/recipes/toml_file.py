"""Read a TOML file (a recipe or opsdctl.toml) into a dict, or one UserError line saying why not:
unreadable, not UTF-8, invalid TOML, or nested too deeply for the parser (`a = [[[[...` 1000
deep makes tomllib raise RecursionError)."""

from __future__ import annotations

from pathlib import Path

from opsdctl.errors import UserError

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - 3.10
    import tomli as tomllib


def read_toml_file(path: Path) -> dict:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                        "save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: invalid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise UserError(f"{path}: invalid TOML: nested too deeply for the parser; flatten the tables") from None
