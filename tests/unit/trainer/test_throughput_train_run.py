"""benchmarks/throughput/train_run.py's arithmetic on a trainer's events: steady steps without
step 1, start-up from the process start, and two processes' rate while both step."""

from __future__ import annotations


import pytest

from support.bench_import import bench_module


@pytest.fixture(scope="module")
def tr():
    return bench_module("throughput.train_run")


def events(t0: float, ready: float, go: float, steps: list[float], rollout_share: float = 0.7) -> list[dict]:
    out = [{"event": "started", "t": t0, "process_start": t0 - 1.0},
           {"event": "ready", "t": ready, "startup": {"imports": 9.0}, "backend": "vllm", "gpu": "H100",
            "gpu_total_mib": 81559, "gpu_memory_utilization": 0.6},
           {"event": "go", "t": go}]
    t = go
    for i, s in enumerate(steps, 1):
        out.append({"event": "step", "step": i, "start": t, "t": t + s, "step_seconds": s,
                    "rollout_seconds": rollout_share * s, "train_seconds": (1 - rollout_share) * s,
                    "completion_length": 1024, "rollout_peak_memory_mib": 50_000 + i, "train_peak_memory_mib": 9_000,
                    "memory_source": "nvml-process", "loss": 0.1})
        t += s
    return out + [{"event": "done", "t": t}]


def test_one_process(tr):
    ev = events(100.0, 160.0, 160.0, [7.0, 4.0, 5.0, 4.5])
    s = tr.rank_summary(ev, exit_at=160.0 + 20.5 + 4.0)
    assert s["first_step_s"] == 7.0 and s["steady"]["steps"] == [2, 3, 4]
    assert s["steady"]["step_s_median"] == 4.5 and s["steady"]["step_s_mean"] == pytest.approx(4.5)
    assert s["steady"]["rollout_s_mean"] == pytest.approx(0.7 * 4.5) and s["steady"]["train_s_mean"] == pytest.approx(1.35)
    assert s["startup"]["process_to_ready_s"] == 61.0 and s["startup"]["process_to_first_step_end_s"] == 68.0
    assert s["peak_memory_mib"] == {"rollout": 50_004, "train": 9_000, "source": "nvml-process"}
    assert s["exit_s"] == pytest.approx(4.0)


def test_two_processes_add_their_rates_inside_the_common_window(tr):
    a = tr.rank_summary(events(0.0, 50.0, 90.0, [9.0] + [8.0] * 10), None)
    b = tr.rank_summary(events(5.0, 88.0, 90.0, [10.0] + [6.0] * 12), None)
    assert a["startup"]["waited_for_go_s"] == 40.0
    c = tr.concurrent_throughput([a, b], rows_per_step=16)
    assert c["step_s_medians_in_window"] == [8.0, 6.0]
    assert c["seconds_per_32_rows"] == pytest.approx(32 / (16 / 8 + 16 / 6), rel=1e-3)
    assert tr.concurrent_throughput([a], 16) is None
