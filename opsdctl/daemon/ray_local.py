"""The Ray instance opsdctl starts itself (`executor = "ray"`, no `ray_address`): loopback only,
its files private to the user.

Left to itself, `ray.init()` binds the GCS server, the raylet, the dashboard and runtime-env
agents and the metrics exporter on every interface (or on the machine's external address): on
Ray 2.40 a client with no credentials ran `id` through it from another machine, and on 2.60
`/metrics` still answered there. Ray replaces a node address of 127.0.0.1 by the machine's
external one (`services.resolve_ip_for_localhost`) unless its multi-node support is off, which is
exactly what a one-machine Ray is; with it off, every server binds 127.0.0.1.

Loopback keeps other machines out, not the other users of this one. Ray's token authentication
(Ray >= 2.52, hence the floor) does: `RAY_AUTH_MODE=token` in the environment that starts the
worker (Ray reads it when it is imported, so opsdctl cannot switch it on later; Ray 2.60 turns it
on for a new local instance unless it is set otherwise). Two of Ray's files would undo it:
- the token: Ray writes `~/.ray/auth_token` with the process's umask, 0644 on most machines, so
  any user could read it. opsdctl writes it first, 0600 in a 0700 `~/.ray` (and tightens one
  Ray left readable), with explicit modes: the umask stages inherit is left as it is;
- the temp dir: Ray makes `/tmp/ray` and every session, socket and log dir under it 0777. The
  instance gets its own temp dir instead, `opsdctl-ray-*` (0700) under `RAY_TMPDIR` or /tmp, with
  Ray's 0777 tree inside it where no other user can reach it; it is removed when the worker exits.
A cluster named by `ray_address` is left as its owner configured it (docs/reliability.md,
docs/cluster.md, docs/security.md).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Optional

LOOPBACK = "127.0.0.1"
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # Ray's name; it gates multi-node on Linux too
TEMP_PREFIX = "opsdctl-ray-"


def local_init_kwargs() -> dict:
    """Prepare this process (and the Ray processes it starts, through the environment) for a
    loopback-only local Ray whose token and temp dir only this user can reach; returns the extra
    `ray.init` arguments."""
    from ray._private import ray_constants

    os.environ[CLUSTER_SWITCH] = "0"  # read by the raylet, agents and workers Ray starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported Ray's constants already
    private_token()
    return {"_node_ip_address": LOOPBACK, "include_dashboard": False, "_temp_dir": str(private_temp_dir())}


def default_token_path() -> Path:
    """Where Ray looks for its token when neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set."""
    return Path.home() / ".ray" / "auth_token"


def private_token() -> Optional[Path]:
    """The token file Ray will use for a new local instance, made before Ray makes it: 0600 in a
    0700 directory. None when Ray reads no file from its default place (token auth off, or the
    token given by RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, which stay the user's own choice)."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token":
        return None
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return None
    path = default_token_path()
    path.parent.mkdir(mode=0o700, exist_ok=True)
    _only_mine(path.parent, 0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # a token from before (perhaps Ray's, 0644): keep it, made private
        _only_mine(path, 0o600)
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))  # 256 bits, the form Ray generates
    return path


def _only_mine(path: Path, mode: int) -> None:
    """Drop the group's and others' bits of a file or directory this user owns."""
    st = path.stat()
    if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)


def private_temp_dir() -> Path:
    """Ray's temp dir for this instance, inside a fresh 0700 directory under RAY_TMPDIR (else
    /tmp: short, as Ray's socket paths must be) that is removed when this process exits (Ray is
    shut down first)."""
    base = os.environ.get("RAY_TMPDIR") or "/tmp"
    root = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=base))  # 0700, whatever the umask
    atexit.register(_remove, root)  # runs before Ray's own exit hook, so it shuts Ray down itself
    return root / "ray"


def _remove(root: Path) -> None:
    import ray

    try:
        if ray.is_initialized():
            ray.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
