"""Why a rollout pool deploy failed, in the replica's own words.

``serve.run`` only raises ``Deploying application rollout failed: Failed to update the
deployments ['RolloutEngine']``. The replica's exception (an engine that cannot start, a bad
model directory, ...) is in the deployment's status message, and with vLLM's engine core in
a process of its own (``VLLM_ENABLE_V1_MULTIPROCESSING`` unset) the engine core's error is
only in the replica's log files under the Ray session dir: both are read here.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from easyvideor1.cli._procs import root_cause_lines


def deploy_failure_reason(app_name: str, limit: int = 8) -> str:
    """The failing deployments of Serve application ``app_name`` with their replicas' exception
    lines, and the replica logs that hold the rest. Call from the driver, after ``serve.run`` raised."""
    from ray import serve

    try:
        status = serve.status()
    except Exception as exc:  # the controller itself may be gone
        return f"serve.status() failed ({type(exc).__name__}: {exc}); see the Ray session logs"
    app = status.applications.get(app_name)
    if app is None:
        return f"Serve has no application {app_name!r} (it was deleted, or never deployed)"
    out = [f"application {app_name!r}: {app.status.value}"]
    for name, deployment in app.deployments.items():
        if not deployment.message:
            continue
        summary = deployment.message.split("Error:", 1)[0].strip().splitlines()[0]
        out.append(f"deployment {name}: {deployment.status.value}: {summary}")
        out += [f"  {line}" for line in root_cause_lines(deployment.message, limit=limit)]
        for log, lines in _replica_logs(app_name, name, limit):
            out.append(f"  replica log {log}:")
            out += [f"    {line}" for line in lines]
    if len(out) == 1 and app.message:
        out += [f"  {line}" for line in root_cause_lines(app.message, limit=limit) or [app.message[:800]]]
    return "\n".join(out)


def _replica_logs(app_name: str, deployment: str, limit: int) -> list[tuple[Path, list[str]]]:
    """Exception lines of the deployment's replica logs (this machine's session dir only)."""
    logs = None
    with contextlib.suppress(Exception):  # a driver on another machine has no such folder
        import ray._private.worker as ray_worker

        logs = Path(ray_worker._global_node.get_logs_dir_path())
    if logs is None or not logs.is_dir():
        return []
    found, shown = [], set()
    for log in sorted((logs / "serve").glob(f"replica_{app_name}_{deployment}_*.log")):
        lines = [line for line in root_cause_lines(log.read_text(errors="replace"), limit=limit) if line not in shown]
        if lines:
            shown.update(lines)
            found.append((log, lines))
    return found
