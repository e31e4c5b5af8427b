"""How every entry point starts Ray: join the cluster of ``ray job submit`` (``RAY_ADDRESS`` set), else start a
private local instance. Token authentication is on for both; a local instance serves on 127.0.0.1 only.

Why both guards: Ray 2.60's GCS, raylet and core-worker gRPC servers listen on ``::`` (every interface) whenever the
node IP is a routable address, and ``ray.init(_node_ip_address="127.0.0.1")`` or ``ray start --node-ip-address=
127.0.0.1`` do not prevent that, since Ray replaces a loopback node IP by the routable one
(``ray._private.services.resolve_ip_for_localhost``). Anyone who can reach such a port can run code on the machine
unless token authentication refuses them, so token authentication is the guard on a cluster. A local job needs no
other machine, so it also keeps the node IP on loopback: Ray does that itself when ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``
is false as Ray is imported (``ray_constants.ENABLE_RAY_CLUSTER``, read once at import; the single-machine mode Ray
uses by default on macOS and Windows), and then every server, agent and metrics endpoint of the instance binds
127.0.0.1 (tests/pipelines/test_security_ray.py lists them).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
AUTH_MODE_VAR = "RAY_AUTH_MODE"
# Ray's switch for its single-machine mode (node IP 127.0.0.1); read once, when ``ray`` is first imported.
SINGLE_MACHINE_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RayAuthError(RuntimeError):
    """Ray would run without token authentication."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ray(*, num_cpus: int, log_to_driver: bool) -> None:
    """Join ``RAY_ADDRESS`` when set (``ray job submit``), else start a local instance of ``num_cpus`` CPUs.

    Raises ``RayAuthError`` when ``RAY_AUTH_MODE`` asks for anything but token authentication."""
    joining = bool(os.environ.get("RAY_ADDRESS"))
    _check_auth_mode(joining)
    if "ray" not in sys.modules and not joining:
        # Ray reads RAY_AUTH_MODE once, when imported: set later, the driver and the servers it starts disagree.
        os.environ.setdefault(AUTH_MODE_VAR, "token")
        _import_ray_single_machine()
    import ray  # not at the top: the switches above must be set before ray's first import, which reads them once

    if ray.is_initialized():
        return
    if joining:  # the job's cluster; its token comes from the head's environment or ~/.ray/auth_token
        ray.init()
        return
    # With RAY_AUTH_MODE token (or unset, when ray was imported earlier) Ray 2.60 starts the new instance with token
    # auth, writes a token to ~/.ray/auth_token when no token is configured, and sets RAY_AUTH_MODE=token
    # (ray._private.authentication.authentication_token_setup.enable_token_auth_by_default).
    # The dashboard on 127.0.0.1 (a free port): Ray's state API runs in it, and Ray Train's placement-group cleaner
    # reads it to free a run's CPUs once the run's controller is gone. Without it every run ended from outside (a
    # sweep's trial stopped by its scheduler) kept its CPUs reserved until the instance stopped: measured, a tiny
    # sweep on 2 CPUs hung at its third trial with two such reservations of 0.5 CPU.
    # Workers are told which dashboard is theirs (RAY_API_SERVER_ADDRESS, read by the state API): with another Ray
    # instance on the machine the cleaner otherwise stops at "Found multiple active Ray instances" and frees nothing.
    dashboard_port = _free_port()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=True, dashboard_host="127.0.0.1",
             dashboard_port=dashboard_port, log_to_driver=log_to_driver,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT),
                                       "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dashboard_port}"}})
    if os.environ.get(AUTH_MODE_VAR) != "token":
        ray.shutdown()
        raise RayAuthError("Ray started this job's local instance without token authentication; this Ray version "
                           "does not turn it on by default (the project pins ray>=2.60,<2.61)")
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        print(f"[ray] Ray was imported before the local start, so its servers also listen on {node_ip} "
              "(token authentication guards them); start Ray through pipelines.ray_start to keep it on 127.0.0.1",
              file=sys.stderr)


def _check_auth_mode(joining: bool) -> None:
    mode = os.environ.get(AUTH_MODE_VAR)
    if mode is None and not joining:
        return  # a new local instance: token auth is Ray's default, and start_ray sets it
    if mode == "token":
        return
    where = ("the cluster of RAY_ADDRESS (start every node with RAY_AUTH_MODE=token, docs/cluster.md)"
             if joining else "this job's local Ray (unset RAY_AUTH_MODE or set RAY_AUTH_MODE=token)")
    shown = repr(mode) if mode is not None else "unset"
    raise RayAuthError(
        f"RAY_AUTH_MODE is {shown}: without token authentication anyone who reaches Ray's GCS, raylet or worker "
        f"ports (every interface of a cluster node; any user of this machine) can run code here. Use token "
        f"authentication for {where}.")


def _import_ray_single_machine() -> None:
    """Import ``ray`` with its single-machine switch on, then remove the switch from the environment: only this
    process computes the node IP (its children are handed 127.0.0.1), and a ``ray start --address`` run later from
    the same environment (a test adding a node) must not see it, since Ray refuses to add nodes in that mode."""
    before = os.environ.get(SINGLE_MACHINE_VAR)
    os.environ[SINGLE_MACHINE_VAR] = "0"
    try:
        import ray  # noqa: F401 - the switch set above is read once, at this first import
    finally:
        if before is None:
            os.environ.pop(SINGLE_MACHINE_VAR, None)
        else:
            os.environ[SINGLE_MACHINE_VAR] = before
