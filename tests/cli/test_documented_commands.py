"""Every command line of README.md, docs/*.md and charts/README.md, run as a reader types it.

Each command runs in a plain shell (``env -i PATH=<venv>/bin:/usr/bin:/bin HOME=<tmp>``, none
of the Makefile's variables) in one workspace holding synthetic data (`evr1 data synth`) and one
tiny model (`evr1 model tiny`), both made by README's own lines. Placeholders become local
things through ``SUBSTITUTIONS``; what cannot run here is in ``NOT_RUN`` with the reason. A
command fails the walk on a non-zero exit, a traceback or a hang. A documented command that is
in neither table is run as written, so a new line of docs is covered the day it is written.
`evr1 serve ...` lines are services: each is started, waited for (``/readyz``), and the curl
lines after it in the same block run against it before it is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from doc_commands import REPO, DocCommand, documented_commands, first_word
from servers import free_port, stop_process

BIN = Path(sys.executable).parent
COMMANDS = documented_commands()
ONE_SHOT_S = 600  # generous: a hang, not a slow machine, should trip these
ENGINE_S = 1200  # commands that start a vLLM engine on 2 shared cores

# (pattern, replacement, why). Replacements may name {ws} (the workspace), {bench} (benchmark
# fixtures in their official layouts, tests/eval/eval_fixtures.py) and {eval_run} (README's eval run).
SUBSTITUTIONS: list[tuple[str, str, str]] = [
    (r"\[--port (\w+)\]", r"--port \1", "a synopsis's port is kept so that the walk can give it a free one"),
    (r" \[[^\]]*\]", "", "the other optional flags of a synopsis are left out"),
    (r"\bDIR\b", "models/tiny", "the model: the walk's one tiny model (README's `evr1 model tiny` line)"),
    (r"\bROOT\b", "{bench}", "benchmark data: tiny fixtures in each benchmark's own layout"),
    (r"\bRUN\.yaml\b", "run.yaml", "the run config: the walk's run.yaml (tiny settings, see RUN_YAML)"),
    (r"\bRUN_[AB]\b", "{eval_run}", "an eval run folder: README's eval run (compared with itself)"),
    (r"s3://(bucket|frames)/(\S+)", r"s3://evr1-docs/\1-\2", "a bucket: the session's SeaweedFS (tests/servers.py)"),
    (r"/data/video-r1/train\.jsonl", "data/train.jsonl", "Video-R1 data: README's converted file"),
    (r"(?<![\w.])/data/", "{ws}/abs-data/", "absolute /data paths: a folder of the workspace"),
    (r"--model models/qwen2\.5-vl-7b", "--model models/tiny", "a real model: the walk's tiny one"),
    (r" --model models/qwen3-vl-8b", "", "a second family's model: one tiny model per walk "
     "(two families: tests/data/test_data_prepare.py::test_prepare_two_families_into_s3_then_load_every_frame_"
     "by_key_without_the_raw_media)"),
    (r"\| kubectl apply -f -", "> /dev/null", "no cluster here: the manifests are rendered, not applied"),
]

_COVERED_UP = ("a whole local cluster (Redis, SeaweedFS, Ray, services, a vLLM pool): run in a user's environment by "
               "tests/distributed/test_cluster_start.py::test_up_without_makefile_env_while_ram_is_held and, with "
               "the Ray trainer job, tests/distributed/test_dist_cluster.py")
_NO_CLUSTER = "needs a Kubernetes cluster (the chart is rendered and validated by tests/k8s/)"
_IN_CLUSTER = "a cluster DNS name, reached from a pod (the same request runs locally in docs/reward-service.md's block)"
_BENCH = "a benchmark: timings to compare side by side (minutes), not a pass/fail check"
_TESTS = "runs tests: the walk does not start a test run inside a test"
NOT_RUN: dict[str, str] = {
    "make demo": "sets the machine up (apt-get, the venv) before `evr1 demo`: tests/train/test_demo_*.py run the demo",
    "make test": _TESTS,
    "make interop": "installs veRL and TRL beside the project (network); tests/interop/ runs what it sets up",
    ".venv/bin/pytest -q tests/interop": _TESTS,
    ".venv/bin/pytest -q tests/distributed/test_dist_units.py tests/distributed/test_dist_rollout_faults.py "
    "tests/distributed/test_dist_cluster.py tests/distributed/test_cluster_supervision.py "
    "tests/distributed/test_ray_trainer_split.py": _TESTS,
    ".venv/bin/pytest -q tests/services/test_frame_cache_*.py tests/security/test_frame_store_integrity.py "
    "tests/distributed/test_weight_sync*.py": _TESTS,
    ".venv/bin/pytest tests/services/test_reward_service.py tests/services/test_reward_client.py": _TESTS,
    "evr1 up / evr1 down": _COVERED_UP,
    "evr1 up --dir .evr1": _COVERED_UP,
    "evr1 status --dir .evr1": _COVERED_UP,
    "evr1 train run.yaml distributed.mode=distributed": _COVERED_UP,
    "evr1 down --dir .evr1": _COVERED_UP,
    "ray job submit --address http://127.0.0.1:DASHBOARD --working-dir RUN_DIR -- python -m "
    "services.trainer.entrypoint run.yaml distributed.train_ranks=2": _COVERED_UP,
    "evr1 up --dir .evr1 --config examples/configs/qwen2.5-vl-7b-8gpu.yaml": "Qwen2.5-VL-7B on 8 GPUs",
    "ray job submit --address http://127.0.0.1:DASHBOARD -- python -m services.trainer.entrypoint "
    "examples/configs/qwen2.5-vl-7b-8gpu.yaml": "Qwen2.5-VL-7B on 8 GPUs, on the cluster of the line before",
    "evr1 train examples/configs/qwen2.5-vl-3b-1gpu.yaml": "Qwen2.5-VL-3B on an 80 GB GPU (tests/config/test_recipes.py "
    "checks the file)",
    "evr1 eval --model DIR --benchmarks videomme,mvbench --data-root ROOT [--out DIR]":
        "the synopsis of README's `evr1 eval` line, which runs (one vLLM engine for eval per walk)",
    ".venv/bin/python benchmarks/distributed_step.py": _BENCH,
    ".venv/bin/python benchmarks/frame_service.py": _BENCH,
    ".venv/bin/python benchmarks/reward_throughput.py": _BENCH,
    "docker build -f docker/reward.Dockerfile -t ghcr.io/easyvideor1/reward:0.1.0 .":
        "no container runtime here; tests/k8s/ checks every Dockerfile (pinned bases, numeric USER, entrypoint)",
    "helm install easyvideor1 charts/": _NO_CLUSTER,
    "helm install easyvideor1 charts/ -f examples/helm/values-external-services.yaml": _NO_CLUSTER,
    "helm install easyvideor1 charts/ --set operator.enabled=true": _NO_CLUSTER,
    "kubectl create secret generic easyvideor1-s3 --from-literal=AWS_ACCESS_KEY_ID=... "
    "--from-literal=AWS_SECRET_ACCESS_KEY=...": _NO_CLUSTER,
    "kubectl create secret generic easyvideor1-reward-token --from-literal=token=...": _NO_CLUSTER,
    "kubectl -n easyvideor1 apply -f examples/k8s/videorljob.yaml": _NO_CLUSTER,
    "kubectl -n easyvideor1 get videorljobs -w": _NO_CLUSTER,
    'curl -s http://easyvideor1-reward:8000/v1/score -d \'{"items": [{"id": "1", "problem_type": "multiple choice", '
    '"response": "<answer>B</answer>", "ground_truth": "B", "options": ["A. red", "B. blue"]}]}\'': _IN_CLUSTER,
    "curl -s http://easyvideor1-reward:8000/v1/score -H 'Content-Type: application/json' -H \"Authorization: Bearer "
    "$TOKEN\" -d '{\"items\": [{\"id\": 1, \"problem_type\": \"multiple choice\", \"response\": \"<answer>B</answer>\", "
    "\"ground_truth\": \"B\", \"options\": [\"A. red\", \"B. blue\"]}]}'": _IN_CLUSTER,
    "evr1 data prepare s3://raw/sets/v1/train.jsonl --config /etc/easyvideor1/run.yaml --model "
    "Qwen/Qwen2.5-VL-7B-Instruct --out s3://easyvideor1/prepared/train.jsonl --media-per-batch 256 --no-progress":
        "the chart's prepare Job in its pod (mounted config, hub model id); the same s3-in, s3-out run: "
        "tests/data/test_data_remote.py::test_prepare_out_s3_then_train_rows_load_every_frame_by_key_from_the_"
        "bucket_alone",
}
# The frame-cache service's curl walk-through needs ids and keys from earlier answers
# (`5b0c...`, `<key>`) and a service the block does not start; tests/services/test_frame_cache_service.py
# calls every one of these routes.
NOT_RUN_BLOCKS = {("docs/frame-cache-service.md", "$S/"): "needs a build id and keys from earlier answers"}

# Commands that read what an earlier documented command wrote.
PREREQS: dict[str, list[str]] = {
    "evr1 data filter-by-pass-rate data/train.jsonl --model DIR -k 8":
        ["evr1 data convert --from video-r1 Video-R1-260k.json --out data/train.jsonl"],
    "evr1 data export --to verl data/train.jsonl --out train.parquet":
        ["evr1 data convert --from video-r1 Video-R1-260k.json --out data/train.jsonl"],
    "evr1 cache build /data/video-r1/train.jsonl --store /data/frame-cache":
        ["evr1 data convert --from video-r1 Video-R1-260k.json --out data/train.jsonl"],
    "evr1 cache report --store ./frame-cache":
        ["evr1 cache build data/synth/train.jsonl --store ./frame-cache --workers 2"],
    "evr1 cache report --store /data/frames":
        ["evr1 cache build data.jsonl --store /data/frames --family qwen2.5-vl --workers 8 --report failures.jsonl"],
    "evr1 eval compare RUN_A RUN_B [--output FILE] [--json]":
        ["evr1 eval --model DIR --benchmarks mvbench,videomme --data-root ROOT"],
}
SETUP = ["evr1 data synth --out data/synth --n-per-type 8 --seed 0", "evr1 model tiny --family qwen2_5_vl --out models/tiny"]
ENGINE_COMMANDS = ("evr1 eval ", "evr1 train ", "evr1 data filter-by-pass-rate ")

# One RL step of 2 questions on the tiny model, frames at the tiny model's smallest budget.
RUN_YAML = {
    "data": {"train_files": "data/synth/train.jsonl", "max_prompt_length": 1024, "max_response_length": 16,
             "rollout_batch_size": 2, "video_max_frames": 4, "video_min_frames": 2, "video_min_pixels": 3136,
             "video_max_pixels": 3136, "image_min_pixels": 784, "image_max_pixels": 3136,
             "frame_cache": {"store": "./frame-cache"}},
    "worker": {"actor": {"model_path": "models/tiny", "mini_batch_size": 2, "gradient_checkpointing": False}},
    "trainer": {"total_steps": 1, "val_every": 0, "val_before_train": False, "output_dir": "runs/docs",
                "resume": "never", "loggers": ["console", "jsonl"]},
    # Read only in distributed mode: a RayJob needs a queue every pod reaches (`evr1 k8s render-job`).
    "distributed": {"queue_url": "redis://easyvideor1-redis:6379/0"},
}


@dataclass
class Done:
    argv: str
    rc: int
    out: str

    def problem(self) -> str | None:
        if "Traceback (most recent call last)" in self.out:
            return "a traceback"
        if self.rc != 0:
            return f"exit {self.rc}"
        return None


@dataclass
class Walk:
    ws: Path
    s3_env: dict[str, str]
    bench: Path
    done: dict[str, Done] = field(default_factory=dict)

    def env(self, text: str) -> dict[str, str]:
        env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(self.ws / "home")}
        if "s3://" in text:  # a user of S3 exports where it is and the keys
            env.update(self.s3_env)
        return env

    def substitute(self, text: str) -> str:
        eval_runs = sorted((self.ws / "eval_runs").glob("*"))
        values = {"ws": str(self.ws), "bench": str(self.bench), "eval_run": str(eval_runs[-1]) if eval_runs else "-"}
        for pattern, replacement, _ in SUBSTITUTIONS:
            text = re.sub(pattern, replacement.format(**values), text)
        return text

    def run(self, text: str) -> Done:
        """``text`` (a documented command) once, after its prerequisites."""
        if text not in self.done:
            for before in PREREQS.get(text, []):
                assert self.run(before).problem() is None, f"prerequisite {before!r} failed"
            command = self.substitute(text)
            timeout = ENGINE_S if command.startswith(ENGINE_COMMANDS) else ONE_SHOT_S
            try:
                proc = subprocess.run(["bash", "-c", command], cwd=self.ws, env=self.env(command), timeout=timeout,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                self.done[text] = Done(command, proc.returncode, proc.stdout)
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                self.done[text] = Done(command, -1, out + f"\n[walk] no exit after {timeout} s: a hang")
        return self.done[text]


def _video_r1_rows(ws: Path) -> list[dict]:
    """Two synthetic rows written the way Video-R1-260k.json writes them (path, solution)."""
    rows = [json.loads(line) for line in (ws / "data/synth/train.jsonl").read_text().splitlines()]
    picked = [next(r for r in rows if r["problem_type"] == kind) for kind in ("multiple choice", "boolean")]
    return [{"problem_id": i, "problem": r["problem"].replace("<video>\n", ""), "data_type": "video",
             "problem_type": r["problem_type"], "options": r.get("options", []),
             "solution": f"<answer>{r['answer']}</answer>", "path": f"data/synth/{r['videos'][0]}",
             "data_source": "synth"} for i, r in enumerate(picked)]


@pytest.fixture(scope="module")
def walk(tmp_path_factory, s3) -> Walk:
    import yaml

    sys.path.insert(0, str(REPO / "tests" / "eval"))
    from eval_fixtures import write_all

    ws = tmp_path_factory.mktemp("docs-walk")
    (ws / "home").mkdir()
    (ws / "examples").symlink_to(REPO / "examples")
    bench = ws / "benchmarks"
    write_all(bench)
    walk = Walk(ws, s3.url_env, bench)
    for text in SETUP:  # README's own lines make the data and the model every other line uses
        assert text in {c.text for c in COMMANDS}, f"README no longer has {text!r}: update SETUP"
        done = walk.run(text)
        assert done.problem() is None, f"{text}: {done.problem()}\n{done.out[-4000:]}"
    (ws / "Video-R1-260k.json").write_text(json.dumps(_video_r1_rows(ws), indent=1))
    synth = [json.loads(line) for line in (ws / "data/synth/train.jsonl").read_text().splitlines()]
    rows = [dict(r, videos=[f"data/synth/{v}" for v in r["videos"]]) for r in synth if r.get("videos")][:4]
    (ws / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (ws / "run.yaml").write_text(yaml.safe_dump(RUN_YAML))
    return walk


def _steps() -> list[tuple[DocCommand, list[DocCommand]]]:
    """Each runnable command; a service comes with the curl lines after it in its block."""
    steps: list[tuple[DocCommand, list[DocCommand]]] = []
    for cmd in COMMANDS:
        if cmd.text in NOT_RUN or _blocked(cmd):
            continue
        if first_word(cmd.text) == "curl" and steps and _is_service(steps[-1][0]) and \
                (steps[-1][0].file, steps[-1][0].block) == (cmd.file, cmd.block):
            steps[-1][1].append(cmd)
        else:
            steps.append((cmd, []))
    return steps


def _blocked(cmd: DocCommand) -> bool:
    return any(cmd.file == file and needle in cmd.text for file, needle in NOT_RUN_BLOCKS)


def _is_service(cmd: DocCommand) -> bool:
    return " serve " in f" {cmd.text} "


STEPS = _steps()


def test_every_documented_command_is_run_or_has_a_reason():
    runnable = {cmd.text for cmd, curls in STEPS} | {c.text for _, curls in STEPS for c in curls}
    for cmd in COMMANDS:
        assert cmd.text in runnable or cmd.text in NOT_RUN or _blocked(cmd), cmd.where
        if first_word(cmd.text) in ("curl", "kubectl", "helm"):  # never run in a step of its own
            assert cmd.text not in {c.text for c, _ in STEPS}, f"{cmd.where}: add it to NOT_RUN with the reason"
    texts = {cmd.text for cmd in COMMANDS}
    stale = [t for t in [*NOT_RUN, *PREREQS, *SETUP, *(b for v in PREREQS.values() for b in v)] if t not in texts]
    assert not stale, f"no longer in the docs (update the tables): {stale}"
    assert all(reason for reason in NOT_RUN.values())


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS, ids=[f"{c.where}" for c, _ in STEPS])
def test_documented_command_runs_from_a_plain_shell(walk, step):
    cmd, curls = step
    if _is_service(cmd):
        _run_service(walk, cmd, curls)
        return
    done = walk.run(cmd.text)
    assert done.problem() is None, f"{cmd.where}: `{done.argv}` gave {done.problem()}:\n{done.out[-6000:]}"


def _local_ports(text: str, ports: dict[str, int]) -> str:
    """``--port N`` and ``localhost:N`` on free ports, the same N on the same one (a session
    running beside this one may hold the documented port)."""
    def repl(m: re.Match) -> str:
        port = ports.setdefault(m.group(2), free_port())
        return f"--port {port}" if m.group(1) == "--port " else f"127.0.0.1:{port}"

    return re.sub(r"(--port |localhost:)(\w+)", repl, text)


def _run_service(walk: Walk, cmd: DocCommand, curls: list[DocCommand]) -> None:
    ports: dict[str, int] = {}
    text = _local_ports(walk.substitute(cmd.text), ports).rstrip(" &")
    assert len(ports) == 1, f"{cmd.where}: a service line names its --port"
    words = shlex.split(text)
    env = walk.env(text)
    while re.match(r"^\w+=", words[0]):  # VAR=value before the command
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    log = walk.ws / f"service-{cmd.file.replace('/', '-')}-{cmd.line}.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(words, cwd=walk.ws, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"http://127.0.0.1:{next(iter(ports.values()))}", proc, log)
        for curl in curls:
            line = _local_ports(walk.substitute(curl.text), ports)
            assert len(ports) == 1, f"{curl.where}: not a request to the service of {cmd.where}"
            done = subprocess.run(["bash", "-c", line], cwd=walk.ws, env=walk.env(line), capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0 and done.stdout.strip(), \
                f"{curl.where}: `{line}` gave {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    finally:
        stop_process(proc, grace=30)
    out = log.read_text(errors="replace")
    assert "Traceback (most recent call last)" not in out, f"{cmd.where}: `{text}`:\n{out[-6000:]}"


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} before ready:\n{log.read_text(errors='replace')[-6000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url}/readyz not 200 after {timeout} s:\n{log.read_text(errors='replace')[-6000:]}")


def test_tables_name_only_real_substitutions():
    """Every substitution still changes some documented command (else it is dead weight)."""
    for pattern, _, why in SUBSTITUTIONS:
        assert any(re.search(pattern, c.text) for c in COMMANDS), f"{pattern!r} ({why}) matches no command"
    assert os.path.isdir(REPO / "examples")
