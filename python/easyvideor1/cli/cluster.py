"""``evr1 up`` / ``evr1 down`` / ``evr1 status``: the distributed mode as a real cluster on one machine.

``up`` starts, each in its own session and on free loopback ports: Redis (work queue and version
boards, append-only file on), SeaweedFS S3 (``weed mini``: weights and frame blobs), a Ray head
(with dashboard, for ``ray job submit``), the frame-cache service over S3, the reward service,
and the rollout pool on Ray Serve (``evr1 serve rollout``). It returns once all are healthy and
records pids, ports and URLs in ``DIR/cluster.json`` (mode 0600: it holds the S3 keys), which
``evr1 train ... distributed.mode=distributed`` and the Ray trainer entrypoint read for every URL
the run config leaves unset. ``down`` stops exactly what ``up`` started, by pid (docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from easyvideor1.cli._procs import alive, free_port, port_open, spawn, stop_session
from easyvideor1.errors import EasyVideoR1Error

ORDER = ("redis", "s3", "ray", "frame_cache", "reward", "rollout")
STATE_FILE = "cluster.json"
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


def _save(path: Path, state: dict[str, Any]) -> None:
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


def _wait(name: str, record: dict, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not alive(record["pid"], record.get("start")):
            break
        time.sleep(0.3)
    log = Path(record["log"]).read_text(errors="replace")[-3000:] if Path(record["log"]).exists() else ""
    state = "exited" if not alive(record["pid"], record.get("start")) else f"not ready after {timeout:g}s"
    raise ClusterError(f"{name} {state} (log {record['log']}):\n{log}")


def _env(state: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # ray jobs run this python
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
                "EVR1_CLUSTER_FILE": str(Path(state["dir"]) / STATE_FILE), "RAY_AUTH_MODE": ray_auth_mode()})
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process per engine starts in seconds
    if "s3" in state:
        env.update({"EVR1_S3_ENDPOINT": state["s3"]["endpoint"], "AWS_ACCESS_KEY_ID": state["s3"]["access_key"],
                    "AWS_SECRET_ACCESS_KEY": state["s3"]["secret_key"]})
    return env


def _start(state: dict[str, Any], path: Path, args: Any) -> None:
    root, logs = Path(state["dir"]), Path(state["dir"]) / "logs"
    services, defaults = state["services"], state["defaults"]
    evr1 = [sys.executable, "-m", "easyvideor1.cli.main"]

    def started(name: str, record: dict) -> dict:
        services[name] = record
        _save(path, state)
        return record

    redis_port = free_port()
    (root / "redis").mkdir(exist_ok=True)
    redis = started("redis", spawn([shutil.which("redis-server") or "redis-server", "--port", str(redis_port),
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
    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    s3 = started("s3", spawn([weed, "mini", f"-dir={root / 's3' / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                             "-master.telemetry=false", f"-s3.config={config}", f"-admin.port={admin}",
                             f"-admin.port.grpc={admin + 10000}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                             *[f"-{name}={port}" for name, port in ports.items()]],
                            log_path=logs / "s3.log", env=_env(state)))
    s3.update(port=ports["s3.port"], url=state["s3"]["endpoint"])
    (root / "s3" / "data").mkdir(exist_ok=True)

    ray_ports = {name: free_port() for name in _RAY_PORTS}
    temp = tempfile.mkdtemp(prefix="evr1-ray-", dir="/tmp")  # Ray's socket paths must stay short
    ray_bin = str(Path(sys.executable).parent / "ray")
    ray = started("ray", spawn([ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                               f"--num-cpus={args.ray_cpus}", f"--temp-dir={temp}", "--dashboard-host=127.0.0.1",
                               "--include-dashboard=true", "--disable-usage-stats",
                               *[f"--{name}={port}" for name, port in ray_ports.items()]],
                              log_path=logs / "ray.log", env={**_env(state), **_RAY_ENV}))
    ray.update(port=ray_ports["port"], url=f"127.0.0.1:{ray_ports['port']}", temp_dir=temp,
               dashboard=f"http://127.0.0.1:{ray_ports['dashboard-port']}")
    _save(path, state)

    model = args.model
    if model is None:  # the demo's tiny model, built once per cluster dir
        model = str(root / "tiny-qwen2_5_vl")
        if not (Path(model) / "config.json").exists():
            from easyvideor1.models.tiny import build_tiny_model

            build_tiny_model("qwen2_5_vl", model, seed=0)
    state["model"] = str(Path(model).resolve())

    _wait("redis", redis, lambda: port_open(redis_port), 30)
    _wait("SeaweedFS S3", s3, lambda: _s3_ready(state["s3"]), args.timeout)
    _wait("Ray head", ray, lambda: _http_ok(f"{ray['dashboard']}/api/version", ray_auth_headers(ray_auth_mode())), args.timeout)

    env = _env(state)
    fc_port, reward_port = free_port(), free_port()
    frame_cache = started("frame_cache", spawn(
        [*evr1, "serve", "frame-cache", "--host", "127.0.0.1", "--port", str(fc_port), "--store", FRAMES_STORE,
         "--queue", redis["url"], "--namespace", f"{args.namespace}-frame-cache"],
        log_path=logs / "frame_cache.log", env=env))
    frame_cache.update(port=fc_port, url=f"http://127.0.0.1:{fc_port}")
    reward = started("reward", spawn([*evr1, "serve", "reward", "--host", "127.0.0.1", "--port", str(reward_port),
                                      "--workers", str(args.reward_workers)],
                                     log_path=logs / "reward.log", env=env))
    reward.update(port=reward_port, url=f"http://127.0.0.1:{reward_port}")
    _wait("frame-cache service", frame_cache, lambda: _http_ok(f"{frame_cache['url']}/readyz"), args.timeout)
    _wait("reward service", reward, lambda: _http_ok(f"{reward['url']}/readyz"), args.timeout)

    serve_port = free_port()
    rollout = started("rollout", spawn(
        [*evr1, "serve", "rollout", "--ray-address", ray["url"], "--model", state["model"], "--queue", redis["url"],
         "--namespace", args.namespace, "--reward-url", reward["url"], "--frame-store", frame_cache["url"],
         "--weights-store", WEIGHTS_STORE, "--replicas", str(args.replicas), "--engine", args.engine,
         "--max-model-len", str(args.max_model_len), "--visibility-timeout", str(args.visibility_timeout),
         "--http-port", str(serve_port), "--ready-timeout", str(args.timeout)],
        log_path=logs / "rollout.log", env=env))
    rollout.update(port=serve_port, url=f"http://127.0.0.1:{serve_port}")
    _wait("rollout pool", rollout, lambda: "rollout_pool_ready" in Path(rollout["log"]).read_text(errors="replace"),
          args.timeout)
    defaults.update(queue_url=redis["url"], namespace=args.namespace, weights_store=WEIGHTS_STORE,
                    frame_cache_url=frame_cache["url"], reward_url=reward["url"], ray_address=ray["url"],
                    dashboard_url=ray["dashboard"], rollout_url=rollout["url"])


def up(args: Any) -> int:
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    path = root / STATE_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        running = [n for n, r in old.get("services", {}).items() if alive(r["pid"], r.get("start"))]
        if running:
            raise ClusterError(f"the cluster of {path} is still running ({', '.join(running)}): "
                               f"run `evr1 down --dir {args.dir}` first")
    state: dict[str, Any] = {"version": 1, "state": "starting", "dir": str(root), "created_at": time.time(),
                             "namespace": args.namespace, "services": {}, "defaults": {}}
    _save(path, state)
    try:
        _start(state, path, args)
    except BaseException as exc:
        _stop_all(state, path, grace=10)
        if isinstance(exc, EasyVideoR1Error | KeyboardInterrupt):
            raise
        raise ClusterError(f"evr1 up failed: {type(exc).__name__}: {exc}") from exc
    state["state"] = "up"
    _save(path, state)
    print(_summary(state), flush=True)
    return 0


def _stop_all(state: dict[str, Any], path: Path, grace: float) -> dict[str, list]:
    left = {}
    for name in reversed(ORDER):
        record = state["services"].get(name)
        if record is not None:
            remaining = stop_session(record, grace)
            if remaining:
                left[name] = remaining
    temp = state["services"].get("ray", {}).get("temp_dir")
    if temp and Path(temp).name.startswith("evr1-ray-"):
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
    state = _load(Path(args.dir).resolve())
    rows = []
    for name in ORDER:
        record = state["services"].get(name)
        if record is None:
            continue
        up_ = alive(record["pid"], record.get("start"))
        rows.append({"service": name, "pid": record["pid"], "alive": up_, "healthy": up_ and _health(name, record),
                     "url": record.get("url")})
    ok = state.get("state") == "up" and rows and all(r["healthy"] for r in rows)
    if args.json:
        print(json.dumps({"state": state.get("state"), "healthy": bool(ok), "services": rows,
                          "defaults": state.get("defaults", {})}))
    else:
        print(f"cluster {state['dir']}: {state.get('state')}")
        for r in rows:
            print(f"  {r['service']:<12} pid {r['pid']:<8} {'healthy' if r['healthy'] else 'DOWN':<8} {r['url']}")
    return 0 if ok else 1


def _summary(state: dict[str, Any]) -> str:
    s, d = state["services"], state["defaults"]
    lines = [f"evr1 cluster up in {state['dir']} (namespace {state['namespace']}, model {state['model']})"]
    for name in ORDER:
        lines.append(f"  {name:<12} pid {s[name]['pid']:<8} {s[name]['url']}")
    lines += [f"  dashboard    {d['dashboard_url']}", f"  weights      {WEIGHTS_STORE}, frames {FRAMES_STORE}",
              "train:  evr1 train CONFIG distributed.mode=distributed   (unset URLs come from "
              f"{Path(state['dir']) / STATE_FILE})",
              f"  or:   ray job submit --address {d['dashboard_url']} --working-dir RUN_DIR -- "
              "python -m services.trainer.entrypoint run.yaml",
              f"stop:   evr1 down --dir {state['dir']}"]
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser("up", help="start a local distributed cluster (Redis, S3, Ray, services, rollout pool)")
    p.add_argument("--dir", default=".evr1", help="cluster folder: cluster.json, logs, data")
    p.add_argument("--model", default=None, help="model directory of the rollout pool (default: a tiny demo model)")
    p.add_argument("--namespace", default="default", help="queue namespace (distributed.namespace)")
    p.add_argument("--replicas", type=int, default=1, help="rollout replicas")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--visibility-timeout", type=float, default=120.0, help="rollout task lease, seconds")
    p.add_argument("--reward-workers", type=int, default=1)
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
