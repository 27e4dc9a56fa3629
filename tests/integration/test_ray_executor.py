"""executor = "ray" on a local Ray instance started here with declared GPUs (num_gpus=4 on a CPU
machine): chains asking 2 GPUs each run two at a time on distinct GPUs and write everything to
the store from their actors; a chain's actor process killed mid-stage (interrupted, its stage
stopped on the node, re-queued, then run to success); cancel of a running remote chain through
its actor (the whole group dies, a child that ignores SIGTERM included); the worker (the Ray
driver) killed mid-chain, then a new worker stops the orphans through the node and re-queues.
The store is a real SQLite file: the whole "cluster" is this machine."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sys
import threading

import psutil
import pytest
from conftest import (
    FAKE_EVAL,
    FAKE_TRAIN,
    default_config,
    pid_alive,
    stage_pids,
    token_processes,
    wait_for,
)

from opsdctl.config import load_config
from opsdctl.run.worker import Worker
from opsdctl.store.engine import open_store

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

SHORT_TRAIN = "FAKE_STEPS=8 FAKE_STEP_SECONDS=0.25"
LONG_TRAIN = "FAKE_STEPS=4000 FAKE_STEP_SECONDS=0.05 FAKE_CHILD=1"


def long_train_until_released(ws) -> str:
    """LONG_TRAIN, short once `release_long_train(ws)` ran: a re-queued chain runs the commands
    frozen when it was first queued, not the config of the worker that picks it up."""
    return f"FAKE_SHORT_IF={ws.root / 'short-trains'} {LONG_TRAIN}"


def release_long_train(ws) -> None:
    (ws.root / "short-trains").touch()


FREE_GPUS = {"gpus": [{"uuid": f"GPU-fake-{i}", "name": "Fake H100", "pci_bus_id": f"00000000:{0x17 + i:02x}:00.0",
                       "total_mib": 81559} for i in range(4)]}


@pytest.fixture(scope="module")
def gpu_file(tmp_path_factory):
    """The nodes' GPU gate reads this fake NVML answer (OPSDCTL_GPU_PROBE, set for the Ray
    instance): four free 80 GB cards, matching the declared num_gpus=4."""
    path = tmp_path_factory.mktemp("gpus") / "gpus.json"
    path.write_text(json.dumps(FREE_GPUS))
    return path


@pytest.fixture(scope="module")
def cluster(gpu_file):
    """A local Ray instance with 4 declared GPUs; its address lets CLI subprocesses join it.

    Ray itself kills a worker's direct children when the worker exits (when it can); that is no
    help for grandchildren or a worker that is SIGKILLed, and it is a setting. It is off here so
    that the orphans of a dead actor or driver are really there and opsdctl's own clean-up (a
    task pinned to the chain's node) is what stops them."""
    if ray.is_initialized():
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in ("RAY_kill_child_processes_on_worker_exit", "OPSDCTL_GPU_PROBE")}
    os.environ["RAY_kill_child_processes_on_worker_exit"] = "false"  # read by the raylet started here
    os.environ["OPSDCTL_GPU_PROBE"] = f"fake:{gpu_file}"  # inherited by the actors: their GPU gate
    try:
        # (log_to_driver off: the actors' lines would land in the in-process CLI's captured output)
        ctx = ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, namespace="opsdctl-tests",
                       logging_level="ERROR", log_to_driver=False)
        yield ctx.address_info["gcs_address"]
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ray_config(ws, address: str, *, train_env: str = SHORT_TRAIN, eval_env: str = "", grace: float = 2):
    # Stage behaviour travels in the command (the actors' environment is the Ray instance's).
    train = (f"echo CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} ORDER=$CUDA_DEVICE_ORDER && {train_env} {sys.executable} {FAKE_TRAIN} "
             f"--recipe {{recipe_json}} --seed {{seed}} --output-dir {{stage_dir}}")
    ev = f"{eval_env} {sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"
    extra = f'executor = "ray"\nray_address = "{address}"\ngpus_per_chain = 2'
    ws.write_config(default_config(train=train, eval=ev, extra=extra, grace=grace))
    cfg = load_config(ws.root / "opsdctl.toml")
    return cfg, open_store(cfg.db)


def _utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)






def _under_live_actor(pid: int) -> bool:
    """Is `pid`'s parent a live ChainRunner actor process (not gone, not a zombie)?"""
    try:
        parent = psutil.Process(pid).parent()
        return (parent is not None and parent.status() != psutil.STATUS_ZOMBIE
                and "ChainRunner" in " ".join(parent.cmdline()))
    except psutil.Error:
        return False


def _nothing_running(ws) -> bool:
    return (ws.sql("select count(*) from chain where state = 'running'") == [(0,)]
            and ws.sql("select count(*) from stage where state = 'running'") == [(0,)])


def test_executor_settings(tmp_path):
    from opsdctl.config import config_from_dict
    from opsdctl.errors import UserError
    from opsdctl.run.executors import executor_kind, worker_gate_config
    from opsdctl.run.ray_cluster import gpus_per_chain, node_config

    def cfg(**top):
        gpus = top.pop("gpus", {"devices": [0, 1, 2, 3]})
        return config_from_dict({**top, "gpus": gpus}, tmp_path)

    assert executor_kind(cfg()) == "local" and worker_gate_config(cfg()).devices == [0, 1, 2, 3]
    ray_cfg = cfg(executor="ray")
    assert gpus_per_chain(ray_cfg) == 4  # default: the devices count
    assert gpus_per_chain(cfg(executor="ray", gpus_per_chain=2)) == 2
    assert gpus_per_chain(cfg(executor="ray", gpus={"devices": []})) == 0
    with pytest.raises(UserError, match="set gpus_per_chain"):
        gpus_per_chain(cfg(executor="ray", gpus={"devices": "all"}))
    # the worker's gate does not probe its own machine; a node's gate sees Ray's GPUs
    assert worker_gate_config(ray_cfg).devices == [] and worker_gate_config(ray_cfg).section("gpus")["devices"] == []
    node = node_config(ray_cfg, [2, 3])
    assert node.devices == [2, 3] and node.section("gpus")["devices"] == [2, 3] and ray_cfg.devices == [0, 1, 2, 3]
    for bad, words in (({"executor": "k8s"}, 'must be "local"'), ({"gpus_per_chain": -1}, ">= 0")):
        with pytest.raises(UserError, match=words) as err:
            cfg(**bad)
        assert "\n" not in str(err.value)


def test_chains_run_two_at_a_time_on_distinct_gpus(ws, cluster):
    # the first two trains wait for each other: on a loaded machine an actor can take longer to
    # start than a short chain takes to run, and the overlap asserted below must not hang on that
    cfg, store = ray_config(ws, cluster, train_env=f"FAKE_RENDEZVOUS={ws.root / 'started'}:2 {SHORT_TRAIN}")
    assert Worker(cfg, store, drain=True, report=lambda m: None).run() == 0  # nothing queued:
    assert not ray.util.placement_group_table()  # no node slot was reserved for nothing
    ws.cli("queue", "baseline", "--repeats", "4")
    messages: list[str] = []
    ran = Worker(cfg, store, drain=True, report=messages.append).run()
    assert ran == 4, messages
    rows = ws.sql("select id, state, node_id, started_at, finished_at from chain order by id")
    assert [r[1] for r in rows] == ["succeeded"] * 4, messages
    assert all(r[2] for r in rows)  # the node each ran on
    assert ws.sql("select count(*) from score") == [(4,)]  # results ingested on the nodes
    assert ws.sql("select count(*) from train_stats") == [(4,)]
    spans = {cid: (_utc(start), _utc(end)) for cid, _, _, start, end in rows}

    def overlap(a, b):
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    pairs = [(a, b) for a in spans for b in spans if a < b and overlap(a, b)]
    assert pairs, spans  # chains ran at the same time ...
    for c in spans:  # ... but never more than two (4 GPUs / 2 per chain)
        assert sum(1 for d in spans if d != c and overlap(c, d)) <= 2
        during = [d for d in spans if d != c and overlap(c, d)]
        assert not any(overlap(a, b) for a in during for b in during if a < b)
    gpus = {}
    for cid in spans:
        log = (ws.runs / str(cid) / "train.log").read_text()
        cvd, granted, order = re.search(r"CVD=(\S*) GPUS=(\S*) ORDER=(\S*)", log).groups()
        assert cvd == granted and order == "PCI_BUS_ID"  # granted by the planner's gate on the node
        gpus[cid] = set(cvd.split(","))
        assert len(gpus[cid]) == 2 and gpus[cid] <= {"0", "1", "2", "3"}
        assert ws.sql("select distinct gpus from stage where chain_id = ?", cid) == [(cvd,)]
    for a, b in pairs:
        assert not gpus[a] & gpus[b], (a, b, gpus)  # concurrent chains never share a GPU
    assert _nothing_running(ws)
    assert not ray.util.placement_group_table() or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


def test_gpu_gate_runs_on_the_node_over_rays_gpus(ws, cluster, gpu_file):
    """Every 2-GPU slot of the node holds a GPU that a foreign process fills: the node's gate
    waits for it (gpu_wait_minutes), then skips the chain naming the holder; nothing is killed."""
    busy = json.loads(json.dumps(FREE_GPUS))
    for i in (0, 2):  # Ray gives a chain {0, 1} or {2, 3}: either way one card is taken
        busy["gpus"][i]["processes"] = [{"pid": os.getpid(), "used_mib": 61000, "name": "someone-else"}]
    gpu_file.write_text(json.dumps(busy))
    try:
        ray_config(ws, cluster)
        text = (ws.root / "opsdctl.toml").read_text().replace(
            "devices = []", "devices = []\nmin_free_mib = 70000\ngpu_wait_minutes = 0.05", 1)
        ws.write_config(text)
        cfg = load_config(ws.root / "opsdctl.toml")
        ws.cli("queue", "baseline")
        assert Worker(cfg, open_store(cfg.db), drain=True, report=lambda m: None).run() == 1
    finally:
        gpu_file.write_text(json.dumps(FREE_GPUS))
    chain = ws.chains()[1]
    assert chain["state"] == "skipped", chain
    reason = chain["reason"]
    assert reason.startswith("train: GPUs not ready") and f"held by pid {os.getpid()}" in reason, reason
    assert re.search(r"GPU [02]: 20559 MiB free < 70000 needed", reason), reason
    assert ws.sql("select count(*) from stage") == [(0,)]  # no stage started on a busy card
    assert pid_alive(os.getpid()) and _nothing_running(ws)


def test_actor_process_killed_mid_chain(ws, cluster):
    cfg, store = ray_config(ws, cluster, train_env=long_train_until_released(ws))
    ws.cli("queue", "baseline")
    seen: dict = {}

    def kill_the_actor():
        try:
            leader, child, token = wait_for(lambda: stage_pids(ws, 1, "train"), 90, what="the train stage")
            wait_for(lambda: (ws.runs / "1" / "train" / "progress.jsonl").is_file(), 30, what="progress")
            actor = psutil.Process(leader).parent()  # the stage's parent: the ChainRunner's process
            assert actor.pid != os.getpid() and "ChainRunner" in " ".join(actor.cmdline()), actor.cmdline()
            seen.update(leader=leader, child=child, token=token, actor=actor.pid)
            actor.send_signal(signal.SIGKILL)
        except BaseException as exc:  # surface it in the main thread
            seen["error"] = exc

    t = threading.Thread(target=kill_the_actor)
    t.start()
    messages: list[str] = []
    ran = Worker(cfg, store, drain=True, report=messages.append, max_chains=1).run()
    t.join()
    assert "error" not in seen, seen.get("error")
    assert ran == 1
    assert not pid_alive(seen["actor"])
    # the stage's own processes (own session, so they outlived the actor) were stopped on the node
    wait_for(lambda: not pid_alive(seen["leader"]) and not pid_alive(seen["child"]), 10, what="the orphans to die")
    assert token_processes(seen["token"]) == []
    chains = ws.chains()
    assert chains[1]["state"] == "interrupted", messages
    assert "Ray actor died" in chains[1]["reason"] and "during train" in chains[1]["reason"]
    assert re.search(r"stopped \d+ stage process", chains[1]["reason"]), chains[1]["reason"]
    assert chains[2]["state"] == "queued" and chains[2]["requeued_from"] == 1
    assert ws.sql("select state from stage where chain_id = 1") == [("interrupted",)]
    assert _nothing_running(ws)
    assert any("re-queued as chain 2" in m for m in messages), messages

    release_long_train(ws)  # the re-queued chain (same frozen commands) now runs to its end
    assert Worker(cfg, store, drain=True, report=messages.append).run() == 1
    assert ws.chains()[2]["state"] == "succeeded"


def test_cancel_running_remote_chain_through_its_actor(ws, cluster):
    # The eval hangs; its child ignores SIGTERM, so only the KILL after the grace ends it.
    # (a 3 s grace: the actor's own watch loop, which also sees the cancel, cannot finish first)
    cfg, store = ray_config(ws, cluster, eval_env="FAKE_HANG=1 FAKE_CHILD=1 FAKE_IGNORE_TERM=1", grace=3)
    ws.cli("queue", "baseline")
    seen: dict = {}

    def cancel_it():
        try:
            leader, child, token = wait_for(lambda: stage_pids(ws, 1, "eval"), 90, what="the eval stage")
            seen.update(leader=leader, child=child, token=token)
            seen["out"] = ws.run("cancel", "1")  # the real CLI: joins the cluster, calls the actor
        except BaseException as exc:
            seen["error"] = exc

    t = threading.Thread(target=cancel_it)
    t.start()
    messages: list[str] = []
    Worker(cfg, store, drain=True, report=messages.append).run()
    t.join()
    assert "error" not in seen, seen.get("error")
    out = seen["out"].stdout
    assert "cancelled" in out and "through its Ray actor on" in out, out
    assert re.search(r"stopped [1-9]\d* stage process", out), out
    assert not pid_alive(seen["leader"]) and not pid_alive(seen["child"])
    assert token_processes(seen["token"]) == []
    assert ws.state(1) == "cancelled"
    assert ws.sql("select name, state from stage where chain_id = 1 order by id") == [
        ("train", "succeeded"), ("eval", "cancelled")]
    assert _nothing_running(ws)


def test_sigterm_stops_remote_stages_and_interrupts(ws, cluster):
    """SIGTERM to the worker: each actor stops its own stage; chains end interrupted and are re-queued."""
    cfg, store = ray_config(ws, cluster, train_env=LONG_TRAIN)
    ws.cli("queue", "baseline", "--repeats", "2")
    seen: dict = {}

    def signal_the_worker():
        try:
            seen["pids"] = [wait_for(lambda c=c: stage_pids(ws, c, "train"), 90, what=f"chain {c}'s train")
                            for c in (1, 2)]
            os.kill(os.getpid(), signal.SIGTERM)  # the worker runs in this process, its handler installed
        except BaseException as exc:
            seen["error"] = exc

    t = threading.Thread(target=signal_the_worker)
    t.start()
    worker = Worker(cfg, store, report=lambda m: None)
    worker.run()
    t.join()
    assert "error" not in seen, seen.get("error")
    assert worker.stop.reason == "SIGTERM"
    for leader, child, token in seen["pids"]:
        assert not pid_alive(leader) and not pid_alive(child) and token_processes(token) == []
    chains = ws.chains()
    assert set(chains) == {1, 2, 3, 4}  # re-queued, as after a SIGKILL
    for c in (1, 2):
        assert chains[c]["state"] == "interrupted" and "worker stopped (SIGTERM) during train" in chains[c]["reason"]
    assert {chains[c]["state"] for c in (3, 4)} == {"queued"}
    assert _nothing_running(ws)
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


def test_worker_killed_mid_chain_then_recovered_through_the_node(ws, cluster):
    ray_config(ws, cluster, train_env=long_train_until_released(ws))
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")  # a real `opsdctl worker`, joining the cluster as its own driver
    try:
        leader, child, token = wait_for(lambda: stage_pids(ws, 1, "train"), 120, what="the train stage")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    # Ray ends the dead driver's actors; the stage runs on in its own session: the orphan case.
    wait_for(lambda: not _under_live_actor(leader), 60, interval=0.2, what="Ray to end the dead driver's actor")
    assert pid_alive(leader) and pid_alive(child) and ws.state(1) == "running"

    release_long_train(ws)  # the re-queued chain's frozen train is the long one
    cfg, store = ray_config(ws, cluster)
    messages: list[str] = []
    assert Worker(cfg, store, drain=True, report=messages.append).run() == 1
    assert not pid_alive(leader) and not pid_alive(child) and token_processes(token) == []
    chains = ws.chains()
    assert chains[1]["state"] == "interrupted"
    assert f"worker (pid {worker.pid}) died during train" in chains[1]["reason"]
    assert re.search(r"stopped [1-9]\d* orphaned stage process", chains[1]["reason"]), chains[1]["reason"]
    assert chains[2]["state"] == "succeeded" and chains[2]["requeued_from"] == 1
    assert ws.sql("select state from stage where chain_id = 1") == [("interrupted",)]
    assert _nothing_running(ws)


class _BrokenRunner:
    """A ChainRunner whose creation fails on the node, as when opsdctl is missing there."""

    def __init__(self, *args, **kwargs):
        raise ImportError("No module named 'opsdctl' (emulated: not installed on this node)")

    def run(self):  # pragma: no cover - never reached
        return "succeeded"


def test_actor_that_cannot_start_fails_the_chain_without_requeue(ws, cluster, monkeypatch):
    from ray import cloudpickle

    from opsdctl.run import ray_cluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the nodes cannot import tests/
    try:
        monkeypatch.setattr(ray_cluster, "ChainRunner", _BrokenRunner)
        cfg, store = ray_config(ws, cluster)
        ws.cli("queue", "baseline")
        messages: list[str] = []
        assert Worker(cfg, store, drain=True, report=messages.append).run() == 1
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    chains = ws.chains()
    assert set(chains) == {1}, chains  # not re-queued: every retry would meet the same node set-up
    assert chains[1]["state"] == "failed"
    assert "could not start on node" in chains[1]["reason"] and "not installed" in chains[1]["reason"]
    assert _nothing_running(ws)
