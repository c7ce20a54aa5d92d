"""The supervisor of a cluster that ``evr1 up`` started: restarts a local service that dies.

``evr1 up`` starts it last, as one more detached process (``DIR/cluster.json``'s ``supervisor``
record, log ``DIR/logs/supervisor.log``). Every second it checks each service's pid and start
time (``_procs.alive``); one that is gone is restarted with the argv it was started with, so the
same ports, data folders and run config: Redis with its append-only file in ``DIR/redis`` (the
data comes back), SeaweedFS S3 on ``DIR/s3/data``, the frame-cache and reward services with
``--config DIR/run.yaml``. What the dead one left in its session (a worker holding the port) is
stopped first. Restarts back off exponentially (1 s doubling to 30 s); a restart that dies or is
not ready within its budget, or dies within ``STABLE_S`` of being ready, is a quick failure, and
after ``--max-failures`` of them in a row the supervisor gives up on that service and says why.
Each restart bumps the record's ``restarts`` and ``last_restart`` in cluster.json (new pid and
start time included), which ``evr1 status`` shows.

Not restarted, reported as down with the reason instead: the Ray head (its GCS state, the Serve
application and any Ray job, goes with it and a new head would have none of them: ``evr1 down``
and ``evr1 up`` again), and the rollout pool's holder process ``evr1 serve rollout`` (the Serve
application lives in the Ray cluster, not in it, and keeps serving; Ray Serve restarts dead
replicas; starting the holder again would redeploy every replica).

``evr1 down`` never races it: under ``DIR/cluster.lock`` it sets the state to ``stopping`` (the
supervisor spawns and records a restart under that lock too, and never after that state), stops
the supervisor, then reads cluster.json again for the pids of what was restarted.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.cli._procs import alive, log_text, port_open, root_cause_lines, spawn, stop_session

LOCK_FILE = "cluster.lock"
RESTARTED = ("redis", "s3", "frame_cache", "reward")
NOT_RESTARTED = {
    "ray": "the Ray head is not restarted: its GCS state (the Serve application, Ray jobs) went with it; "
           "run `evr1 down` and `evr1 up` again",
    "rollout": "the holder process of the rollout pool is not restarted (that would redeploy every replica); "
               "the Serve application lives on the Ray head and Ray Serve restarts its dead replicas",
}
STABLE_S = 60.0  # a restart that lives this long after it was ready is no longer a quick failure
READY_S = {"s3": 300.0}  # budget for a restart to be ready; weed's filer comes up last
READY_DEFAULT_S = 180.0


@contextlib.contextmanager
def cluster_lock(root: Path) -> Iterator[None]:
    """Held by whoever rewrites cluster.json while the cluster runs (the supervisor, ``down``)."""
    with open(root / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start(state: dict[str, Any], root: Path, env: dict[str, str]) -> dict:
    """Start the supervisor of the cluster in ``root``; returns its record for cluster.json."""
    return spawn([sys.executable, "-m", "easyvideor1.cli.supervise", "--dir", str(root)],
                 log_path=root / "logs" / "supervisor.log", env=env)


def stop(root: Path, state: dict[str, Any], grace: float) -> dict[str, Any]:
    """Stop the supervisor before the services (``evr1 down``); returns cluster.json as it left it.

    Only its own process: the services it restarted are its children, and ``down`` stops each
    of them in order by its own record."""
    from easyvideor1.cli.cluster import STATE_FILE, _save

    record = state.get("supervisor")
    if record is None:  # not started yet (a failed `up`), or a cluster.json of an older evr1
        return state
    path = root / STATE_FILE
    with cluster_lock(root):
        state = json.loads(path.read_text())
        state["state"] = "stopping"  # seen by the supervisor before any further restart
        _save(path, state)
    pid, started = int(record["pid"]), record.get("start")
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive(pid, started):
            time.sleep(0.1)
    return json.loads(path.read_text())


def restart_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A service's row of ``evr1 status --json``: its restarts, the last one, why it stays down."""
    return {"restarts": record.get("restarts", 0), "last_restart": record.get("last_restart"),
            "down_reason": record.get("down")}


def watcher(state: dict[str, Any]) -> dict[str, Any]:
    """The supervisor's row of ``evr1 status`` ({} for a cluster.json without one)."""
    record = state.get("supervisor")
    if record is None:
        return {}
    return {"pid": record["pid"], "alive": alive(record["pid"], record.get("start")), "log": record["log"]}


def status_text(row: dict[str, Any]) -> str:
    """What ``evr1 status`` adds to a service's line (from :func:`restart_fields`)."""
    out = []
    if row.get("restarts"):
        out.append(f"restarts {row['restarts']} (last {time.strftime('%H:%M:%S', time.localtime(row['last_restart']))})")
    if row.get("down_reason"):
        out.append(f"not restarted: {row['down_reason']}")
    return "".join(f"  {part}" for part in out)


@dataclass
class Watch:
    """What the supervisor knows of one service between two looks."""

    phase: str = "up"  # up | waiting (to restart at next_try) | starting (until ready) | down
    failures: int = 0  # quick failures in a row
    next_try: float = 0.0
    deadline: float = 0.0  # of the restart being ready
    ready_at: float | None = None  # when the last restart was ready


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {message}", flush=True)


class Supervisor:
    def __init__(self, root: Path, backoff_s: float, backoff_max_s: float, max_failures: int,
                 interval_s: float) -> None:
        from easyvideor1.cli.cluster import STATE_FILE

        self.root, self.path = root, root / STATE_FILE
        self.backoff_s, self.backoff_max_s, self.max_failures = backoff_s, backoff_max_s, max_failures
        self.interval_s = interval_s
        self.watches: dict[str, Watch] = {}
        self.exits: dict[int, int] = {}  # exit status of the restarts it started (its children)
        self.stopping = False

    def load(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def ready(self, name: str, record: dict, state: dict) -> bool:
        from easyvideor1.cli.cluster import _http_ok, _s3_ready

        if name == "redis":
            return port_open(record["port"])
        if name == "s3":
            return _s3_ready(state["s3"])
        return _http_ok(f"{record['url']}/readyz")

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        _log(f"watching the cluster of {self.path} (pid {os.getpid()})")
        while not self.stopping:
            state = self.load()
            if state.get("state") in ("stopping", "down"):
                break
            if state.get("state") == "up":  # before that, `evr1 up` still writes cluster.json
                self._reap()
                for name, record in state["services"].items():
                    self.look(name, record, state)
            time.sleep(self.interval_s)
        _log("stopping: the cluster is being stopped")
        return 0

    def _reap(self) -> None:
        """Collect the exit status of restarts that died (no zombies; the log says how they ended)."""
        with contextlib.suppress(ChildProcessError):
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                self.exits[pid] = status

    def _ended(self, record: dict) -> str:
        pid = int(record["pid"])
        if pid not in self.exits:  # died since the last reap, if it is its child at all
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.exits[pid] = status
        status = self.exits.get(pid)
        if status is None:  # not its child (started by `evr1 up`): the status went to its parent
            return "exited"
        if os.WIFSIGNALED(status):
            return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        return f"exited with code {os.WEXITSTATUS(status)}"

    def look(self, name: str, record: dict, state: dict) -> None:
        watch = self.watches.setdefault(name, Watch(phase="down" if record.get("down") else "up"))
        now = time.monotonic()
        living = alive(record["pid"], record.get("start"))
        if watch.phase == "up":
            if living:
                if watch.ready_at is not None and now - watch.ready_at >= STABLE_S:
                    watch.failures, watch.ready_at = 0, None
                return
            quick = watch.ready_at is not None and now - watch.ready_at < STABLE_S
            self.failed(name, record, f"{self._ended(record)} (pid {record['pid']})", quick)
        elif watch.phase == "waiting" and now >= watch.next_try:
            self.restart(name, record, watch)
        elif watch.phase == "starting":
            if not living:
                self.failed(name, record, f"{self._ended(record)} before it was ready (pid {record['pid']})", True)
            elif self.ready(name, record, state):
                watch.phase, watch.ready_at = "up", now
                _log(f"{name} is back (pid {record['pid']}, restart {record.get('restarts', 0)})")
            elif now >= watch.deadline:
                self.failed(name, record, f"was not ready within {READY_S.get(name, READY_DEFAULT_S):g}s "
                                          f"(pid {record['pid']})", True)

    def failed(self, name: str, record: dict, why: str, quick: bool) -> None:
        watch = self.watches[name]
        _log(f"{name} {why}")
        if name not in RESTARTED:
            self.mark_down(name, NOT_RESTARTED.get(name, "not a service the supervisor restarts"), watch)
            return
        cause = root_cause_lines(log_text(record), limit=3)
        if cause:
            _log(f"{name}'s log {record['log']}: " + " | ".join(cause))
        left = stop_session(record, grace=5)  # what it left in its session (a worker holding its port)
        if left:
            _log(f"{name}: processes of the dead one survived SIGKILL: {left}")
        watch.failures = watch.failures + 1 if quick else 0
        if watch.failures >= self.max_failures:
            self.mark_down(name, f"gave up after {watch.failures} quick failures in a row (last: {why}); "
                                 f"see {record['log']}", watch)
            return
        delay = min(self.backoff_s * 2 ** watch.failures, self.backoff_max_s)
        watch.phase, watch.next_try = "waiting", time.monotonic() + delay
        _log(f"{name}: restarting in {delay:g}s")

    def mark_down(self, name: str, reason: str, watch: Watch) -> None:
        watch.phase = "down"
        _log(f"{name}: {reason}")
        self.update(name, lambda record: record.update(down=reason))

    def update(self, name: str, change: Callable[[dict], Any]) -> dict | None:
        """Change one service's record in cluster.json, unless the cluster is being stopped."""
        from easyvideor1.cli.cluster import _save

        with cluster_lock(self.root):
            state = self.load()
            if state.get("state") != "up" or self.stopping:
                self.stopping = True
                return None
            change(state["services"][name])
            _save(self.path, state)
            return state["services"][name]

    def restart(self, name: str, record: dict, watch: Watch) -> None:
        def respawn(record: dict) -> None:
            # The argv it was started with: same ports, data folder and run config. The environment
            # is the supervisor's own, which `evr1 up` gave every service.
            fresh = spawn(record["argv"], log_path=Path(record["log"]), env=dict(os.environ))
            record.update(fresh, restarts=record.get("restarts", 0) + 1, last_restart=time.time())
            record.pop("down", None)

        # Spawned and recorded under the lock: `down` either sees the new pid or this never happens.
        try:
            fresh = self.update(name, respawn)
        except OSError as exc:  # the binary is gone, the log cannot be written
            self.failed(name, record, f"could not be started: {exc}", True)
            return
        if fresh is None:
            return
        record = fresh
        watch.phase, watch.deadline = "starting", time.monotonic() + READY_S.get(name, READY_DEFAULT_S)
        _log(f"{name} restarted (pid {record['pid']}, restart {record['restarts']}, log {record['log']})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m easyvideor1.cli.supervise",
                                description="Restart the services of an `evr1 up` cluster that die.")
    p.add_argument("--dir", required=True, help="the cluster folder (cluster.json)")
    p.add_argument("--backoff-s", type=float, default=1.0, help="first delay before a restart; doubles per failure")
    p.add_argument("--backoff-max-s", type=float, default=30.0)
    p.add_argument("--max-failures", type=int, default=5, help="quick failures in a row before giving up")
    p.add_argument("--interval-s", type=float, default=1.0, help="how often the pids are looked at")
    args = p.parse_args(argv)
    return Supervisor(Path(args.dir).resolve(), args.backoff_s, args.backoff_max_s, args.max_failures,
                      args.interval_s).run()


if __name__ == "__main__":
    sys.exit(main())
