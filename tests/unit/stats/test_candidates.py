"""Candidate labels (opsdctl.stats.candidates): pure and stable, the code's short tree id only when
it differs."""

from __future__ import annotations

from opsdctl.stats import candidates as cand


def test_labels_are_pure_and_stable():
    A, B = "a" * 40, "b" * 40
    base, tc, tc2 = cand.Identity("h0", A), cand.Identity("h1", A), cand.Identity("h1", B)
    runs = [cand.Run(1, "baseline", base), cand.Run(2, "token-clip", tc), cand.Run(5, "token-clip", tc2),
            cand.Run(7, "baseline-again", base), cand.Run(9, "left-pad", cand.Identity("h0", B))]
    labels = cand.assign_labels(runs, prefer="baseline")
    assert labels == {base: "baseline", tc: "token-clip", tc2: "token-clip @bbbbbb", cand.Identity("h0", B): "left-pad"}
    # whoever ran first keeps the plain name; a later code state gets its short id
    assert cand.assign_labels(list(reversed(runs)), prefer="baseline") == labels
    # the same tree with other stage commands
    cmd = cand.Identity("h1", A, "c" * 16)
    assert cand.label_for(cmd, "token-clip", labels) == "token-clip @aaaaaa cmd cccccc"
    assert cand.label_for(cand.Identity("h9", A), "new-idea", labels) == "new-idea"
    # pooled and non-recipe identities ignore the code
    assert cand.identity("h1", A, pool_code=True) == cand.identity("h1", B, pool_code=True) == cand.Identity("h1")
    assert cand.identity("hb", A, kind="base") == cand.Identity("hb")
    assert cand.short_code("/abs/live/dir") == "live" and cand.short_code(None) == "-"
