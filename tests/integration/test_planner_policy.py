"""`worker --policy adaptive` and `try_every_variant` through the CLI and the config: the plan
reaches the worker and `status`."""

from __future__ import annotations


def test_worker_policy_flag_end_to_end(ws):
    """`worker --policy adaptive` through the CLI: the first run of every variant before repeats."""
    ws.cli("queue", "token-clip", "-n", "2")
    ws.cli("queue", "cosine")
    assert ws.status()["planner"]["policy"] == "fifo"
    res = ws.run("worker", "--drain", "--policy", "adaptive")
    assert res.returncode == 0
    started = [r[0] for r in ws.sql("select chain_id from stage where name = 'train' order by id")]
    assert started == [1, 3, 2]  # token-clip, cosine (new), then token-clip's repeat
    # the worker is gone: status shows the order the next `opsdctl worker` (the config's fifo) follows
    st = ws.status()["planner"]
    assert st["policy"] == "fifo" and st["plan_at"] is None
    bad = ws.run("worker", "--drain", "--policy", "random", check=False)
    assert bad.returncode == 2 and "--policy random: must be fifo or adaptive" in bad.stderr


def test_try_every_variant_reaches_the_plan_from_config_and_flag(ws):
    """[planner] try_every_variant (or --try-every-variant) turns value of information off: the
    tiers alone order the queue, so every variant gets its first run before any repeat."""
    from opsdctl.config import load_config
    from opsdctl.plan.planner import settings_from_config, with_overrides

    cfg = load_config(ws.root / "opsdctl.toml")
    assert settings_from_config(cfg).try_every_variant is False
    on = with_overrides(cfg, policy_name="adaptive", try_every_variant=True)
    s = settings_from_config(on)
    assert (s.policy, s.try_every_variant) == ("adaptive", True)
    text = (ws.root / "opsdctl.toml").read_text().replace("[worker]", "[planner]\ntry_every_variant = true\n\n[worker]")
    (ws.root / "opsdctl.toml").write_text(text)
    assert settings_from_config(load_config(ws.root / "opsdctl.toml")).try_every_variant is True
    bad = text.replace("try_every_variant = true", 'try_every_variant = "yes"')
    (ws.root / "opsdctl.toml").write_text(bad)
    out = ws.cli("status", check=False)
    assert out.returncode == 2 and "try_every_variant" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    (ws.root / "opsdctl.toml").write_text(text)
    ws.cli("queue", "token-clip", "-n", "2")
    ws.cli("queue", "cosine")
    assert ws.run("worker", "--drain", "--policy", "adaptive", "--try-every-variant").returncode == 0
    started = [r[0] for r in ws.sql("select chain_id from stage where name = 'train' order by id")]
    assert started == [1, 3, 2]


def test_objective_verdicts_from_config_and_flag_holds_a_new_idea_back(ws):
    """[planner] objective = "verdicts" (or --objective verdicts): token-clip has run once and the
    time left holds three chains, so the session pays for the baseline and one idea: cosine's first
    run waits behind token-clip's repeat, in status's order (the tiers alone put it first); a bad
    value is one line, exit 2."""
    from opsdctl.config import load_config
    from opsdctl.plan.planner import settings_from_config, with_overrides

    cfg = load_config(ws.root / "opsdctl.toml")
    assert settings_from_config(cfg).objective == "submission"
    assert settings_from_config(with_overrides(cfg, objective="verdicts")).objective == "verdicts"
    ws.cli("queue", "token-clip")
    assert ws.run("worker", "--drain").returncode == 0
    ws.cli("queue", "cosine")  # chain 2
    ws.cli("queue", "token-clip")  # chain 3
    high = max(e["high_s"] for e in ws.status()["planner"]["timeline"])
    (ws.root / "left.txt").write_text(str(3.5 * high))
    text = (ws.root / "opsdctl.toml").read_text().replace("[budget]\n", '[budget]\nremaining_file = "left.txt"\n').replace(
        "[worker]", '[planner]\npolicy = "adaptive"\ntry_every_variant = true\nobjective = "verdicts"\n\n[worker]')
    (ws.root / "opsdctl.toml").write_text(text)

    def order():
        st = ws.status()["planner"]
        return st["objective"], [e["chain_id"] for e in st["timeline"] if e["state"] == "queued"]

    assert order() == ("verdicts", [3, 2])
    assert "objective verdicts" in ws.cli("status").stdout
    (ws.root / "opsdctl.toml").write_text(text.replace('objective = "verdicts"\n', ""))
    assert order() == ("submission", [2, 3])  # the tiers alone: a new idea's first run first
    (ws.root / "opsdctl.toml").write_text(text.replace('objective = "verdicts"', 'objective = "certify"'))
    out = ws.cli("status", check=False)
    assert out.returncode == 2 and "objective" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    (ws.root / "opsdctl.toml").write_text(text)
    bad = ws.run("worker", "--drain", "--objective", "certify", check=False)
    assert bad.returncode == 2 and "--objective certify: must be submission or verdicts" in bad.stderr
    assert ws.sql("select count(*) from stage where chain_id > 1")[0][0] == 0  # refused before anything ran
