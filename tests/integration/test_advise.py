"""`opsdctl advise` over a real store: its JSON, its text, and compare's Next line are one ranking."""

from __future__ import annotations


def test_advise_json_over_a_real_store(ws):
    ws.cli("queue", "baseline", "token-clip", "--repeats", "2", "--seed", "3")
    ws.run("worker", "--drain")
    ws.cli("queue", "cosine")
    got = ws.cli_json("advise", "--json")
    assert got and all(set(a) == {"action", "variant", "minutes", "gpu_minutes", "fits", "gain"} for a in got)
    assert all(a["gpu_minutes"] == a["minutes"] for a in got)  # no GPUs here: priced in minutes
    kinds = {a["action"] for a in got}
    assert {"repeat", "baseline", "new", "stop"} <= kinds <= {"repeat", "baseline", "re-eval", "screen", "new", "stop"}
    assert next(a for a in got if a["action"] == "new")["variant"] == "cosine"
    assert next(a for a in got if a["action"] == "stop")["gain"] == 0.0
    assert all(a["gain"] >= 0.0 and a["minutes"] >= 0.0 for a in got)
    text = ws.cli("advise").stdout
    assert "stop: submit the best forecast now" in text and "per GPU minute" in text.splitlines()[0]
    # compare's Next: line is this ranking, never another rule
    report = ws.cli_json("compare")
    assert [{k: a[k] for k in got[0]} for a in report["advice"]] == got
    assert ws.cli_json("compare", "baseline")["advice"] == report["advice"]  # whatever is shown
    out = " ".join(ws.cli("compare").stdout.split())
    first = report["advice"][0]
    assert f"Run next: {first['text']}" in out  # its first line after what to submit
    assert report["run_next"] == first
    explained = " ".join(ws.cli("compare", "--explain").stdout.split())
    assert "Next (`opsdctl advise`" in explained
    assert (first["text"].split(":")[0] if first["action"] != "stop" else "stop: nothing left is worth") in explained


def test_advise_without_a_noise_estimate_says_so(ws):
    assert ws.cli_json("advise", "--json") == []
    assert "No advice yet: no noise estimate" in ws.cli("advise").stdout
