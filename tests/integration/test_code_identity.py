"""Code identity: a candidate is (knobs, code tree, commands); `show` lists each
run's code snapshot, `compare` keeps code states apart unless `--pool-code`, `opsdctl diff` shows
what differs, and a variant with another's knobs under another name is flagged at queue time and
is not another candidate unless its code differs. A real git workspace, real subprocess stages,
a real SQLite store."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import FAKE_EVAL, default_config

from opsdctl.stats.scores import candidate_labels
from opsdctl.store.engine import open_store
from opsdctl.store.models import Chain
from opsdctl.store.open_read import open_reader


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}).stdout


def _git_workspace(ws):
    ws.write_config(default_config(snapshot=True))
    (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
    (ws.root / "opsd_trainer.py").write_text("CLIP = 'entry'\n")
    git(ws.root, "init", "-q")
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "released code")


def _tree(ws, chain_id: int) -> str:
    return ws.sql("select s.key from chain c join code_snapshot s on s.id = c.snapshot_id where c.id = ?", chain_id)[0][0]


def _entries(report) -> dict:
    return {e["name"]: e for e in report["variants"] if e.get("n") and not e.get("partial")}


def test_two_code_states_are_two_candidates_unless_pooled(ws):
    _git_workspace(ws)
    ws.cli("queue", "baseline", "token-clip", "--repeats", "2")            # chains 1-4 on the released code
    (ws.root / "opsd_trainer.py").write_text("CLIP = 'token, keeping its direction'\n")  # the method lives in the code
    ws.cli("queue", "token-clip", "--repeats", "2")                        # chains 5-6 on the edited code
    ws.run("worker", "--drain")
    a, b = _tree(ws, 3), _tree(ws, 5)
    assert a != b and _tree(ws, 1) == a

    report = ws.cli_json("compare")
    entries = _entries(report)
    edited = f"token-clip @{b[:6]}"
    assert set(entries) == {"token-clip", edited}
    assert entries["token-clip"]["chain_ids"] == [3, 4] and entries[edited]["chain_ids"] == [5, 6]
    assert entries[edited]["code"] == b[:6] and entries[edited]["variants"] == ["token-clip"]
    assert report["baseline"]["n"] == 2 and report["alpha_spending"]["m"] == 2
    assert any("token-clip ran on 2 code states" in n and "--pool-code merges them" in n for n in report["notes"])
    text = ws.cli("compare").stdout
    assert edited in text and "--pool-code" in ws.cli("compare", "--explain").stdout  # the note

    pooled = ws.cli_json("compare", "--pool-code")
    entries = _entries(pooled)
    assert set(entries) == {"token-clip"} and entries["token-clip"]["n"] == 4 and pooled["alpha_spending"]["m"] == 1
    assert pooled["pool_code"] is True
    assert any(n.startswith("--pool-code: token-clip's runs on 2 code trees") for n in pooled["notes"])

    # show: each run's code snapshot (commit, dirty flag, short diff stat)
    show = ws.cli_json("show", "token-clip")
    codes = {r["chain_id"]: r["code"] for r in show["runs"]}
    assert codes[3]["tree"] == a and codes[5]["tree"] == b and codes[5]["short"] == b[:6]
    assert codes[3]["dirty"] is False and codes[5]["dirty"] is True and codes[5]["commit"]
    assert "1 file changed" in codes[5]["diffstat"] and "opsd_trainer.py" in codes[5]["files"]
    assert {r["chain_id"]: r["candidate"] for r in show["runs"]} == {3: "token-clip", 4: "token-clip", 5: edited, 6: edited}
    out = ws.cli("show", "token-clip").stdout
    assert f"@{b[:6]} dirty" in out and f"code @{b[:6]}: git" in out and "1 file changed" in out

    # diff: code and knob differences
    d = ws.cli_json("diff", "3", "5")
    assert d["knobs"] == [] and d["code"]["same"] is False and d["same_candidate"] is False
    assert "M opsd_trainer.py" in d["code"]["files"] and "1 file changed" in d["code"]["diffstat"]
    assert d["commands"] == []  # the same templates: only the chains' own paths differ
    same = ws.cli_json("diff", "3", "4")
    assert same["same_candidate"] and same["code"]["same"] and same["settings"] == [{"what": "seed", "a": 0, "b": 1}]
    knobs = ws.cli_json("diff", "1", "3")
    assert {"section": "method", "knob": "clip_mode", "a": "entry", "b": "token"} in knobs["knobs"]
    text = ws.cli("diff", "1", "5", "--patch").stdout
    assert "clip_mode" in text and "opsd_trainer.py" in text and "+CLIP = 'token, keeping its direction'" in text
    proc = ws.cli("diff", "1", "99", check=False)
    assert proc.returncode == 2 and "99" in proc.stderr

    # queued chains get the label of their code state (what the planner matches with compare)
    more = ws.cli_json("queue", "token-clip")  # on the edited code
    ws.cli("queue", "--eval-only", str(ws.runs / "3" / "train" / "checkpoint-final"), "--partial", "3x2")
    store = open_store(f"sqlite:///{ws.db}")
    labels = candidate_labels(open_reader(store), [more[0]["chain_id"], more[0]["chain_id"] + 1], "baseline")
    assert labels == {more[0]["chain_id"]: edited, more[0]["chain_id"] + 1: "token-clip"}  # eval-only: its trainer's code
    store.dispose()


def test_same_knobs_under_another_name_is_flagged_and_not_another_candidate(ws):
    _git_workspace(ws)
    ws.recipe("left-pad", """
        name = "left-pad"
        extends = "baseline"
        description = "left padding: implemented in the data collator, no knob"
    """)
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "left-pad recipe")
    ws.cli("queue", "baseline", "token-clip", "--repeats", "2")
    proc = ws.cli("queue", "left-pad")
    assert "same knobs as baseline; queue it as baseline?" in " ".join(proc.stderr.split())
    ws.run("worker", "--drain")
    report = ws.cli_json("compare")
    entries = _entries(report)
    assert set(entries) == {"token-clip"} and report["baseline"]["n"] == 3  # left-pad's run is a baseline run
    assert report["alpha_spending"]["m"] == 1
    assert any("left-pad: same knobs as baseline on the same code; counted as baseline" in n for n in report["notes"])
    # once the collator really changes, left-pad is a candidate of its own
    (ws.root / "opsd_trainer.py").write_text("PAD = 'left'\n")
    ws.cli("queue", "left-pad")
    ws.run("worker", "--drain")
    report = ws.cli_json("compare")
    entries = _entries(report)
    assert set(entries) == {"token-clip", "left-pad"} and report["baseline"]["n"] == 3
    assert entries["left-pad"]["chain_ids"] == [6] and report["alpha_spending"]["m"] == 2


@pytest.mark.skipif(not hasattr(Chain, "commands_hash"), reason="chains do not record their stage commands yet")
def test_runs_made_with_other_stage_commands_are_not_pooled_silently(ws):
    ws.cli("queue", "baseline", "token-clip", "--repeats", "2")  # chains 1-4: the eval writes result.json
    ws.write_config(default_config(eval=f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}} --final-only"))
    ws.cli("queue", "token-clip", "--repeats", "2")  # chains 5-6: the FINAL line only
    ws.run("worker", "--drain")
    entries = _entries(ws.cli_json("compare"))
    other = [name for name in entries if name.startswith("token-clip @")]
    assert len(other) == 1 and " cmd " in other[0] and entries[other[0]]["chain_ids"] == [5, 6]
    assert entries["token-clip"]["chain_ids"] == [3, 4]
    assert _entries(ws.cli_json("compare", "--pool-code"))["token-clip"]["n"] == 4
    d = ws.cli_json("diff", "3", "5")
    assert not d["same_candidate"] and [c["stage"] for c in d["commands"]] == ["eval"]
    assert "--final-only" in d["commands"][0]["b"] and "commands differ" in ws.cli("diff", "3", "5").stdout
