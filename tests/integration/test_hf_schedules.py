"""The learning-rate schedules the effective-config unit tests read (tests/support/hf_schedules.json)
are what the installed transformers' get_scheduler computes: a transformers release that changed
a schedule fails here, and `python -m tests.support.hf_schedules` stores the new one."""

from __future__ import annotations

import json

import pytest

from tests.support.hf_schedules import SCHEDULES, STORE, compute, key


def test_every_stored_schedule_is_transformers_own():
    doc = json.loads(STORE.read_text())
    assert sorted(doc) == sorted(key(*s) for s in SCHEDULES)
    for s in SCHEDULES:
        assert doc[key(*s)] == pytest.approx(compute(*s), rel=1e-12, abs=0.0), key(*s)
