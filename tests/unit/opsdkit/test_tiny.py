"""The tiny assets' cache housekeeping, without building anything: partial builds that a killed
process left are removed, and one whose build still holds its lock is kept."""

from __future__ import annotations

from filelock import FileLock

from opsdkit import tiny


def test_partial_builds_are_removed_unless_their_lock_is_held(tmp_path):
    stale = [tmp_path / ".tiny-v3-k1ll3d", tmp_path / f".tiny-v{tiny.TINY_VERSION}-0ld"]
    building = tmp_path / ".tiny-v9-n0w"
    for d in (*stale, building):
        (d / "model").mkdir(parents=True)
        (d / "train.jsonl").write_text("{}\n")
    kept = [tmp_path / f"tiny-v{tiny.TINY_VERSION}", tmp_path / ".tiny-vx-odd", tmp_path / "other"]
    for d in kept:
        d.mkdir()
    with FileLock(str(tmp_path / "tiny-v9.lock")):  # another build of v9 is writing right now
        removed = tiny.remove_stale_builds(tmp_path, log=None)
    assert sorted(removed) == sorted(stale)
    assert not any(d.exists() for d in stale) and building.is_dir() and all(d.is_dir() for d in kept)
    assert tiny.remove_stale_builds(tmp_path, log=None) == [building]  # its lock free now: nobody's


def test_the_shipped_model_is_this_version(tmp_path):
    info = tiny.shipped_info()
    assert info is not None and info["version"] == tiny.TINY_VERSION
    assert info["warm_start_steps"] == tiny.WARM_START_STEPS and info["warm_start_threads"] == tiny.WARM_START_THREADS
    assert tiny.shipped_info(tmp_path) is None  # a package without it: the warm start runs here
