"""opsdctl.daemon.host_limits: chains at once against the host's RAM and CPUs, by hand; where the
needs come from; the host as a process sees it (cgroup limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsdctl.config import config_from_dict
from opsdctl.daemon import host_limits as hl
from opsdctl.errors import UserError


def test_chains_at_once_against_ram_and_cpus():
    need = hl.HostNeeds(ram_gib_per_chain=24, cpus_per_chain=3)
    big = hl.HostResources(ram_gib=503, cpus=64)
    assert hl.host_fits(4, need, big) == hl.HostVerdict(True, 20, None)  # RAM: 503 // 24 = 20, CPUs 21
    small = hl.HostResources(ram_gib=62.6, cpus=16)
    v = hl.host_fits(4, need, small)
    assert not v.fits and v.chains_held == 2
    assert "4 chains at once need 96 GiB of RAM (24 each, ram_gib_per_chain) where the host has 63" in v.reason
    assert "CPUs" not in v.reason and "holds 2 chains at once" in v.reason and "\n" not in v.reason
    v = hl.host_fits(4, hl.HostNeeds(8, 6), hl.HostResources(500, 16))
    assert not v.fits and "24 CPUs (6 each, cpus_per_chain) where the host has 16" in v.reason and "RAM" not in v.reason
    v = hl.host_fits(2, hl.HostNeeds(600, 20), hl.HostResources(500, 16))
    assert v.chains_held == 0 and "holds no chain" in v.reason and " and " in v.reason
    assert hl.host_fits(4, hl.HostNeeds(24, 0), hl.HostResources(100, 1)).fits  # 0: CPUs not checked
    assert hl.host_fits(1000, hl.HostNeeds(0, 0), hl.HostResources(1, 1)).fits


def cfg_of(tmp_path, profile="qwen3-1.7b", host=None, devices=(0, 1, 2, 3)):
    raw = {"profile": profile, "gpus": {"devices": list(devices)}, **({"host": host} if host is not None else {})}
    return config_from_dict(raw, tmp_path, tmp_path / "opsdctl.toml")


def test_needs_come_from_the_profile_unless_host_says(tmp_path):
    assert hl.needs_of(cfg_of(tmp_path)) == hl.HostNeeds(16.0, 2.0)
    assert hl.needs_of(cfg_of(tmp_path, "tiny")) == hl.HostNeeds(0.0, 0.0)  # tiny CPU chains: not checked
    assert hl.needs_of(cfg_of(tmp_path, host={"ram_gib_per_chain": 40, "cpus_per_chain": 0})) == hl.HostNeeds(40.0, 0.0)
    # the profile's needs are its GPU workloads': a worker without GPUs checks only what [host] says
    assert hl.needs_of(cfg_of(tmp_path, devices=())) == hl.HostNeeds(0.0, 0.0)
    assert hl.needs_of(cfg_of(tmp_path, devices=(), host={"cpus_per_chain": 1})) == hl.HostNeeds(0.0, 1.0)
    for bad in ({"ram_gib_per_chain": -1}, {"cpus_per_chain": float("nan")}, {"ram_gb": 3}):
        with pytest.raises(UserError):
            cfg_of(tmp_path, host=bad)


def test_check_host_refuses_in_one_line_naming_the_file(tmp_path):
    cfg = cfg_of(tmp_path, host={"ram_gib_per_chain": 30, "cpus_per_chain": 2})
    assert hl.check_host(cfg, 2, hl.HostResources(64, 8)).fits
    with pytest.raises(UserError) as exc:
        hl.check_host(cfg, 4, hl.HostResources(64, 8))
    assert str(exc.value).startswith(f"{tmp_path / 'opsdctl.toml'}: [host]: 4 chains at once need 120 GiB")


def test_the_host_as_a_process_sees_it(tmp_path, monkeypatch):
    have = hl.host_resources()
    assert have.ram_gib > 0 and have.cpus >= 1
    monkeypatch.setattr(hl, "CGROUP", tmp_path)
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert hl._cgroup_ram_bytes() is None and hl._cgroup_cpus() is None
    (tmp_path / "memory.max").write_text(f"{2 * 2**30}\n")
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    limited = hl.host_resources()
    assert limited.ram_gib == pytest.approx(min(2.0, have.ram_gib)) and limited.cpus == pytest.approx(min(1.5, have.cpus))
    monkeypatch.setattr(hl, "CGROUP", Path("/nonexistent"))
    assert hl.host_resources() == have
