"""Unit tests build no model: the tiny profile's assets (a warm-started model) are refused here, so
a test that reaches them through `tiny://` fails at once on every machine instead of building them
for minutes on a fresh one (tests/unit/test_layout.py refuses the fixtures that build them)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_tiny_assets(monkeypatch):
    from opsdkit import tiny

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test reached the tiny assets (tiny://...): give it a local file instead, "
                             "or move it to tests/integration/ with the tiny_assets fixture")

    monkeypatch.setattr(tiny, "ensure_tiny_assets", refuse)
