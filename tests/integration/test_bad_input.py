"""Every bad recipe and config case exits 2 with one line on stderr, naming the
file and the key, and leaves the store byte-identical.

A few cases go through the real console script in a subprocess; the rest call the same
`opsdctl.cli.main.main` entry point in-process (fast), with the same argv, cwd and exit code."""

from __future__ import annotations

import sys

import pytest
from conftest import default_config
from support.queued_workspace import build_template, copy_of

from opsdctl.cli import main as cli

BASE = 'name = "{name}"\nextends = "baseline"\n'

BAD_RECIPES = {
    "unknown_top_key": ('{base}colour = "blue"\n', "colour: unknown top-level key"),
    "unknown_hparam": ('{base}[hparams]\nlearning_rat = 1e-5\n', "did you mean learning_rate"),
    "wrong_type": ('{base}[hparams]\nlora_r = "64"\n', "lora_r = '64': must be an integer"),
    "float_for_int": ('{base}[hparams]\nlora_r = 64.5\n', "lora_r = 64.5: must be an integer"),
    "lora_r_range": ('{base}[hparams]\nlora_r = 512\n', "lora_r = 512: must be an integer >= 1 and <= 256"),
    "completion_range": ('{base}[hparams]\nmax_completion_length = 8192\n', "<= 4096"),
    "negative_lr": ('{base}[hparams]\nlearning_rate = -1e-5\n', "learning_rate"),
    "bool_as_string": ('{base}[hparams]\nfixed_teacher = "yes"\n', "true or false"),
    "budget_knob_hparam": ('{base}[hparams]\nmax_steps = 200\n', "max_steps: is a budget knob"),
    "budget_knob_top": ('{base}per_device_train_batch_size = 8\n', "per_device_train_batch_size: is a budget knob"),
    "budget_knob_method": ('{base}[method]\nmodel_name_or_path = "x"\n', "model_name_or_path: is a budget knob"),
    "hparam_in_method": ('{base}[method]\nlora_r = 32\n', "lora_r: is a hyper-parameter; move it to [hparams]"),
    "method_in_hparams": ('{base}[hparams]\nclip_mode = "token"\n', "clip_mode: is not a whitelisted hyper-parameter"),
    "unknown_method": ('{base}[method]\nclip_style = "token"\n', "clip_style: unknown method knob"),
    "bad_choice": ('{base}[method]\nclip_mode = "tok"\n', "clip_mode = 'tok': must be one of entry, token"),
    "two_teachers": ('{base}[hparams]\nuse_ema_teacher = true\n', "pick one teacher"),
    "invalid_toml": ('{base}[hparams\nlora_r = 8\n', "invalid TOML"),
    "missing_parent": ('name = "{name}"\nextends = "nosuch"\n', "extends = 'nosuch'"),
    "bad_name": ('name = "has space"\n', "name = 'has space'"),
    "hparams_not_table": ('{base}hparams = 3\n', "hparams: must be a table"),
}


def _store_bytes(ws) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(ws.root.glob("runs.db*")) if not p.name.endswith(".lock")}


@pytest.fixture(scope="module")
def _template(tmp_path_factory):
    """One store with two queued chains, built once; each test gets its own copy."""
    return build_template(tmp_path_factory, "errors")


@pytest.fixture
def populated(_template, tmp_path):
    ws = copy_of(_template, tmp_path)
    snapshot = (_store_bytes(ws), ws.counts())
    assert snapshot[1]["chain"] == 2
    return ws, snapshot


def _main(ws, monkeypatch, capsys, *argv) -> tuple[int, str]:
    monkeypatch.chdir(ws.root)
    monkeypatch.delenv("OPSDCTL_CONFIG", raising=False)
    monkeypatch.setattr(sys, "argv", ["opsdctl", *argv])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    return exc.value.code, capsys.readouterr().err


def _assert_one_line(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("case", sorted(BAD_RECIPES))
def test_bad_recipe_refused(populated, monkeypatch, capsys, case):
    ws, (before_bytes, before_counts) = populated
    body, needle = BAD_RECIPES[case]
    path = ws.recipe(case, body.format(base=BASE.format(name=case), name=case))
    code, err = _main(ws, monkeypatch, capsys, "queue", case)
    assert code == 2
    _assert_one_line(err, needle, str(path))
    assert _store_bytes(ws) == before_bytes and ws.counts() == before_counts


def test_extends_cycle_and_missing_recipe(populated, monkeypatch, capsys):
    ws, (before_bytes, before_counts) = populated
    ws.recipe("a", 'name = "a"\nextends = "b"\n')
    ws.recipe("b", 'name = "b"\nextends = "./a.toml"\n')
    code, err = _main(ws, monkeypatch, capsys, "queue", "a")
    assert code == 2
    _assert_one_line(err, "extends cycle: a.toml -> b.toml -> a.toml")
    code, err = _main(ws, monkeypatch, capsys, "queue", "nosuch")
    assert code == 2
    _assert_one_line(err, "recipe 'nosuch': no nosuch.toml", "available: a, b, baseline")
    # a good recipe and a bad one in the same call: nothing is queued
    ws.recipe("bad", 'name = "bad"\n[hparams]\nlora_r = 0\n')
    code, err = _main(ws, monkeypatch, capsys, "queue", "baseline", "bad")
    assert code == 2 and "lora_r = 0" in err
    assert _store_bytes(ws) == before_bytes and ws.counts() == before_counts


BAD_CONFIGS = {
    "unknown_key": ("runs_dri = 'x'\n", "runs_dri: unknown key (did you mean runs_dir?)"),
    "wrong_type": ("snapshot_code = 'yes'\n", "snapshot_code = 'yes': must be true or false"),
    "unknown_section": ("[gpu]\ndevices = []\n", "[gpu]: unknown section (did you mean [gpus]?)"),
    "devices": ("[gpus]\ndevices = 'some'\n", "[gpus] devices"),
    "min_free": ("[gpus]\nmin_free_mib = -1\n", "[gpus] min_free_mib = -1: must be an integer >= 0"),
    "two_budgets": ("[budget]\nhours = 6\nremaining_file = 't'\n", "pick one source"),
    "bad_deadline": ("[budget]\ndeadline = 'soon'\n", "[budget] deadline = 'soon'"),
    "placeholder": ("[stages.train]\ncommand = 'train --seed {sed}'\n", "unknown placeholder {sed} (did you mean {seed}?)"),
    "checkpoint_in_train": ("[stages.train]\ncommand = 'x {checkpoint}'\n", "{checkpoint} is only known in the eval stage"),
    "stray_brace": ("[stages.eval]\ncommand = 'awk {print $1}'\n", "not a placeholder"),
    "lone_brace": ("[stages.eval]\ncommand = 'echo }'\n", "stray '}'"),
    "unknown_stage": ("[stages.test]\ncommand = 'x'\n", "[stages.test]: unknown stage"),
    "reference": ("[baseline]\nreference = { mean = 54.22, sd = 1.48 }\n", "reference.n: missing"),
    "profile": ("profile = 'huge'\n", "unknown profile 'huge'"),
    "db_url": ("db = 'not a url'\n", "db = 'not a url': not a database URL"),
    "extra_knob": ("extra_method_knobs = ['clip_mode']\n", "'clip_mode' is already a known knob"),
    "invalid_toml": ("[budget\n", "invalid TOML"),
    # non-finite and absurd numbers, integers beyond 64 bits
    "hours_inf": ("[budget]\nhours = inf\n", "[budget] hours = inf: must be a finite number > 0 and <= 8784 (a year)"),
    "hours_absurd": ("[budget]\nhours = 1e300\n", "[budget] hours = 1e+300: must be a finite number"),
    "margin_nan": ("[budget]\nmargin_minutes = nan\n", "margin_minutes = nan: must be a finite number"),
    "reference_inf": ("[baseline]\nreference = { mean = inf, sd = 1.48, n = 5 }\n", "reference.mean = inf"),
    "reference_sd_nan": ("[baseline]\nreference = { mean = 54.22, sd = nan, n = 5 }\n", "reference.sd = nan"),
    # the setup offset and the family
    "offset_negative": ("[baseline]\nreference = { mean = 54.22, sd = 1.48, n = 5, offset_sd = -1 }\n",
                        "reference.offset_sd = -1"),
    "offset_typo": ("[baseline]\nreference = { mean = 54.22, sd = 1.48, n = 5, ofset_sd = 1 }\n",
                    "unknown key (did you mean offset_sd?)"),
    "family": ("[compare]\nfamily = 'everything'\n", "[compare] family = 'everything'"),
    "grace_neg_inf": ("[worker]\nkill_grace_seconds = -inf\n", "kill_grace_seconds = -inf"),
    "int_beyond_64_bits": ("[gpus]\nmin_free_mib = 99999999999999999999999999999\n", "min_free_mib = 999999999999... (29 digits)"),
    "float_for_int_huge": ("[planner]\ntrain_minutes = 1e20\n", "train_minutes = 1e+20"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_refused(populated, monkeypatch, capsys, case):
    ws, (before_bytes, before_counts) = populated
    text, needle = BAD_CONFIGS[case]
    good = default_config()
    if text.startswith("[") and text.split("]")[0][1:] in ("budget", "gpus", "stages.train", "stages.eval", "baseline", "worker"):
        ws.write_config(_replace_table(good, text.split("]")[0][1:], text))  # a bad version of a table
    elif text.startswith("["):
        ws.write_config(good + "\n" + text)  # an extra table
    else:  # a top-level key: replace its line, or add it
        key = text.split("=")[0].strip()
        lines = [l for l in good.splitlines(keepends=True) if not l.startswith(f"{key} =")]
        ws.write_config(text + "".join(lines))
    for command in (["queue", "baseline"], ["status"], ["worker", "--drain"]):
        code, err = _main(ws, monkeypatch, capsys, *command)
        assert code == 2, (command, err)
        _assert_one_line(err, needle, "opsdctl.toml")
    assert _store_bytes(ws) == before_bytes and ws.counts() == before_counts


def _replace_table(doc: str, name: str, new: str) -> str:
    """Replace the [name] table of a TOML document with `new`."""
    lines = doc.splitlines(keepends=True)
    start = next(i for i, l in enumerate(lines) if l.strip() == f"[{name}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    return "".join(lines[:start]) + new + "\n" + "".join(lines[end:])


def test_console_script_errors_are_one_line(populated, tmp_path):
    """The installed `opsdctl` script: exit 2, one red line, store untouched."""
    ws, (before_bytes, before_counts) = populated
    ws.recipe("big", 'name = "big"\nextends = "baseline"\n[hparams]\nlora_r = 512\n')
    res = ws.run("queue", "big", check=False)
    assert res.returncode == 2 and res.stdout == ""
    _assert_one_line(res.stderr, "big.toml", "lora_r = 512", "<= 256")
    ws.write_config("[gpus]\ndevcies = [0]\n" + default_config().split("[gpus]\n", 1)[1].replace("devices = []\n", "", 1))
    res = ws.run("status", check=False)
    assert res.returncode == 2
    _assert_one_line(res.stderr, "opsdctl.toml", "devcies", "did you mean devices")
    # no config at all
    empty = tmp_path / "empty"
    empty.mkdir()
    import subprocess

    from conftest import clean_env, opsdctl_argv

    res = subprocess.run([*opsdctl_argv(), "status"], cwd=empty, env=clean_env(), capture_output=True, text=True)
    assert res.returncode == 2 and "opsdctl init" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (empty / "runs.db").exists()
    assert _store_bytes(ws) == before_bytes and ws.counts() == before_counts
