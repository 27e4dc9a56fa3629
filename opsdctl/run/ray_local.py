"""The Ray instance opsdctl starts itself (`executor = "ray"`, no `ray_address`): loopback only.

Left to itself, `ray.init()` binds the GCS server, the raylet, the dashboard and runtime-env
agents and the metrics exporter on every interface (or on the machine's external address): on
Ray 2.40 a client with no credentials ran `id` through it from another machine, and on 2.60
`/metrics` still answered there. Ray replaces a node address of 127.0.0.1 by the machine's
external one (`services.resolve_ip_for_localhost`) unless its multi-node support is off, which is
exactly what a one-machine Ray is; with it off, every server binds 127.0.0.1.

Loopback keeps other machines out, not the other users of this one. Ray's token authentication
(Ray >= 2.52, hence the floor) does: `RAY_AUTH_MODE=token` in the environment that starts the
worker (Ray reads it when it is imported, so opsdctl cannot switch it on later). A cluster named by
`ray_address` is left as its owner configured it (docs/reliability.md, docs/cluster.md).
"""

from __future__ import annotations

import os

LOOPBACK = "127.0.0.1"
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # Ray's name; it gates multi-node on Linux too


def local_init_kwargs() -> dict:
    """Prepare this process (and the Ray processes it starts, through the environment) for a
    loopback-only local Ray; returns the extra `ray.init` arguments."""
    from ray._private import ray_constants

    os.environ[CLUSTER_SWITCH] = "0"  # read by the raylet, agents and workers Ray starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported Ray's constants already
    return {"_node_ip_address": LOOPBACK, "include_dashboard": False}
