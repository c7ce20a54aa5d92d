"""The rollout worker: tasks from the work queue -> n scored responses -> results.

One worker drives one engine. Each loop leases up to ``batch_size`` tasks (wire.py format),
keeps the engine on the policy the tasks ask for (:class:`EngineWeights`), runs the same
:class:`~easyvideor1.train.rollout_stage.RolloutStage` the embedded trainer runs (frames from
the frame store, falling back to decoding, counted; mix-policy; rewards through the reward
client) and stores each group with ``put_result`` *before* ``ack``: a worker that dies in
between leaves its leases to expire, and the tasks are delivered again (a second result for a
task is dropped by the queue). A task that cannot be used (malformed payload or sample, or one
that fails alone) is nacked with the reason, and dead-lettered after the queue's max attempts.

Run as a process: ``python -m easyvideor1.rollout.worker --model DIR --queue URL ...``
(``--help``); the Ray Serve pool (services/rollout) wraps the same class.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easyvideor1.cache import FrameLoader, FrameStore
from easyvideor1.logging import event, get_logger
from easyvideor1.queue import Message, QueueUnavailableError, WorkQueue
from easyvideor1.rewards.client import RewardClient, RewardServiceError
from easyvideor1.rollout.base import RolloutEngine
from easyvideor1.rollout.weight_follow import EngineWeights
from easyvideor1.rollout.wire import RolloutTask, TaskError, filtered_payload, parse_task, result_payload

log = get_logger(__name__)
# Worker counter -> FrameLoader counter.
_LOADER_COUNTERS = {"frame_hits": "hits", "frame_decodes": "misses", "frame_store_errors": "fallbacks_store_error"}


@dataclass
class WorkerSettings:
    consumer: str = ""
    batch_size: int = 8
    block_s: float = 1.0
    reward_patience_s: float = 120.0  # how long scoring is retried while the reward service is down
    max_model_len: int | None = None  # prompts that cannot fit beside max_tokens are filtered
    status_file: str | None = None
    max_consecutive_errors: int = 20

    def __post_init__(self) -> None:
        if not self.consumer:
            self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class PatientRewards(RewardClient):
    """Retries scoring while the reward service is unavailable, keeping the generated responses."""

    def __init__(self, inner: RewardClient, patience_s: float, stop: threading.Event):
        self.inner, self.patience_s, self.stop = inner, patience_s, stop
        self.retries = 0

    def score(self, items, problem_type=None):
        deadline = time.monotonic() + self.patience_s
        delay = 0.5
        while True:
            try:
                return self.inner.score(items, problem_type)
            except RewardServiceError as exc:
                if time.monotonic() + delay > deadline or self.stop.is_set():
                    raise
                self.retries += 1
                event(log, "reward_retry", logging.WARNING, items=len(items), delay_s=delay, error=str(exc)[:300])
                self.stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def close(self) -> None:
        self.inner.close()


class _TaskPrompts:
    """Renderer stand-in: the trainer rendered each prompt; the worker uses that exact text."""

    def __init__(self, texts: dict[str, str]):
        self.texts = texts

    def render(self, fields: dict[str, Any]) -> str:
        return self.texts[fields["problem_id"]]


class RolloutWorker:
    def __init__(self, engine: RolloutEngine, queue: WorkQueue, rewards: RewardClient, *,
                 frame_store: FrameStore | None, weights: EngineWeights, settings: WorkerSettings | None = None):
        self.engine, self.queue, self.frame_store, self.weights = engine, queue, frame_store, weights
        self.settings = settings or WorkerSettings()
        self.stop_event = threading.Event()
        self.rewards = PatientRewards(rewards, self.settings.reward_patience_s, self.stop_event)
        self.counters: dict[str, float] = defaultdict(float)
        self.state = "ready"
        self.last_error: str | None = None
        self._holding: list[str] = []
        self._loaders: dict[str, FrameLoader] = {}
        self._thread: threading.Thread | None = None
        self._status_written = 0.0

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> threading.Thread:
        """Run the loop in a daemon thread (the Ray Serve replica does this)."""
        self._thread = threading.Thread(target=self.run, name="rollout-worker", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float | None = 60.0) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def healthy(self) -> bool:
        alive = self._thread is None or self._thread.is_alive() or self.stop_event.is_set()
        return alive and self.state != "failed"

    def run(self) -> None:
        """Loop until :meth:`stop`. A queue outage is waited out; other errors are logged and
        retried with backoff, and only ``max_consecutive_errors`` in a row end the loop (the
        health check then fails, and a supervisor such as Ray Serve replaces the worker)."""
        backoff, errors = 0.5, 0
        event(log, "rollout_worker_started", consumer=self.settings.consumer, queue=repr(self.queue))
        try:
            while not self.stop_event.is_set():
                try:
                    self.step()
                    backoff, errors = 0.5, 0
                    continue
                except QueueUnavailableError as exc:
                    self.state, self.last_error = "waiting_for_queue", str(exc)
                    self.counters["queue_outages"] += 1
                except Exception as exc:
                    errors += 1
                    self.state, self.last_error = "error", f"{type(exc).__name__}: {exc}"
                    self.counters["loop_errors"] += 1
                    log.exception("rollout worker step failed (%d in a row)", errors)
                    if errors >= self.settings.max_consecutive_errors:
                        self.state = "failed"
                        return
                event(log, "rollout_worker_backoff", logging.WARNING, error=str(self.last_error)[:300],
                      retry_s=backoff)
                self._write_status(force=True)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            if self.state != "failed":
                self.state = "stopped"
            self._write_status(force=True)
            event(log, "rollout_worker_stopped", consumer=self.settings.consumer, state=self.state)

    def step(self) -> int:
        """Lease and handle one batch; returns the number of messages handled."""
        self.state = "ready"
        self._write_status()
        messages = self.queue.get(self.settings.consumer, count=self.settings.batch_size,
                                  block_s=self.settings.block_s)
        if not messages:
            return 0
        self.state, self._holding = "working", [m.task_id for m in messages]
        self._write_status(force=True)
        try:
            self._process(messages)
        finally:
            self._holding = []
        self._write_status(force=True)
        return len(messages)

    # ---- one batch ------------------------------------------------------------------------
    def _process(self, messages: list[Message]) -> None:
        batches: dict[str, list[list[tuple[Message, RolloutTask]]]] = defaultdict(list)
        for message in messages:
            self.counters["leased"] += 1
            if message.attempt > 1:
                self.counters["redelivered"] += 1
            try:
                task = parse_task(message.task_id, message.payload)
            except TaskError as exc:
                self.counters["poison"] += 1
                self._nack(message, str(exc))
                continue
            if self.queue.get_result(message.task_id) is not None:  # finished by a worker whose lease expired
                self.counters["already_done"] += 1
                self.queue.ack(message)
                continue
            # One engine call per settings key; a problem id appears once per call (results map by it).
            runs = batches[task.batch_key()]
            target = next((r for r in runs if all(t.sample.problem_id != task.sample.problem_id for _, t in r)),
                          None)
            if target is None:
                target = []
                runs.append(target)
            target.append((message, task))
        for runs in batches.values():
            for batch in runs:
                self._run_batch(batch)

    def _run_batch(self, batch: list[tuple[Message, RolloutTask]]) -> None:
        from easyvideor1.train.rollout_stage import RolloutStage  # the embedded code path, reused as is

        first = batch[0][1]
        try:
            version = self.weights.ensure(first.weights)
        except QueueUnavailableError:
            raise  # the loop waits for the queue; the leases expire and come back
        except Exception as exc:  # weight-sync errors name the store, board and version
            self._nack_all(batch, f"weights for board {first.weights.board!r}: {type(exc).__name__}: {exc}")
            return
        loader = self._loader(first)
        before = loader.stats()
        max_prompt = first.max_prompt_length
        if self.settings.max_model_len is not None:
            max_prompt = min(max_prompt, self.settings.max_model_len - first.sampling.max_tokens)
        stage = RolloutStage(self.engine, loader, _TaskPrompts({t.sample.problem_id: t.prompt_text for _, t in batch}),
                             self.rewards, max_prompt_length=max_prompt,
                             max_response_length=first.max_response_length)
        started = time.perf_counter()
        try:
            result = stage.run([t.sample for _, t in batch], n=first.n, sampling=first.sampling, mix=first.mix,
                               uid_prefix="w")
        except RewardServiceError as exc:
            self._nack_all(batch, f"reward service unavailable: {exc}")
            return
        except Exception as exc:
            if len(batch) > 1:  # find the task that breaks the batch: each alone
                event(log, "rollout_batch_failed", logging.WARNING, tasks=len(batch), error=str(exc)[:300])
                for item in batch:
                    self._run_batch([item])
                return
            self._nack(batch[0][0], f"rollout failed: {type(exc).__name__}: {exc}")
            return
        after = loader.stats()
        deltas = {name: after[field] - before[field] for name, field in _LOADER_COUNTERS.items()}
        for name, value in deltas.items():
            self.counters[name] += value
        share = 1.0 / len(batch)  # per-task share of the batch's counters: their sum is the batch's
        counters = {name: value * share for name, value in deltas.items()}
        counters["seconds"] = (time.perf_counter() - started) * share
        groups = {g.uid: g for g in result.groups}
        filtered = dict(result.filtered)
        common = {"worker": self.settings.consumer, "board": first.weights.board, "counters": counters}
        for k, (message, task) in enumerate(batch):
            group = groups.get(f"w-{k}-{task.sample.problem_id}")
            if group is not None:
                payload = result_payload(task, group, policy_version=group.policy_version,
                                         mix_injected=any(group.is_offline), attempt=message.attempt, **common)
            elif task.sample.problem_id in filtered:
                self.counters["filtered"] += 1
                payload = filtered_payload(task, filtered[task.sample.problem_id], attempt=message.attempt,
                                           policy_version=version, **common)
            else:
                self._nack(message, "the rollout stage returned no outcome for this sample")
                continue
            self._deliver(message, payload)

    def _loader(self, task: RolloutTask) -> FrameLoader:
        key = json.dumps([task.video_params.as_dict(), task.image_params.as_dict()], sort_keys=True)
        loader = self._loaders.get(key)
        if loader is None:
            loader = self._loaders[key] = FrameLoader(self.frame_store, task.video_params, task.image_params)
        return loader

    def _deliver(self, message: Message, payload: dict[str, Any]) -> None:
        """Result first, then ack; an outage in between is waited out (the result is kept)."""
        delay = 0.5
        while True:
            try:
                if not self.queue.put_result(message.task_id, payload):
                    self.counters["duplicate_results"] += 1
                if self.queue.ack(message):
                    self.counters["acked"] += 1
                else:
                    self.counters["lease_lost"] += 1
                self.counters["results"] += 1
                return
            except QueueUnavailableError as exc:
                if self.stop_event.is_set():
                    return  # the lease expires and another worker redoes the task
                self.state, self.last_error = "waiting_for_queue", str(exc)
                event(log, "result_delivery_retry", logging.WARNING, task_id=message.task_id, delay_s=delay)
                self.stop_event.wait(delay)
                delay = min(delay * 2, 5.0)

    def _nack(self, message: Message, reason: str) -> None:
        self.counters["nacked"] += 1
        event(log, "rollout_task_nacked", logging.WARNING, task_id=message.task_id, attempt=message.attempt,
              reason=reason[:500])
        try:
            outcome = self.queue.nack(message, reason[:2000])
        except QueueUnavailableError:
            return  # the lease expires instead; the task is delivered again
        if outcome.value == "dead_lettered":
            self.counters["dead_lettered"] += 1

    def _nack_all(self, batch: list[tuple[Message, RolloutTask]], reason: str) -> None:
        for message, _ in batch:
            self._nack(message, reason)

    # ---- status ---------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        counters = dict(self.counters)
        counters["reward_retries"] = float(self.rewards.retries)
        return {"state": self.state, "consumer": self.settings.consumer, "pid": os.getpid(),
                "engine_version": int(getattr(self.engine, "policy_version", 0)), "board": self.weights.board,
                "holding": list(self._holding), "counters": counters, "last_error": self.last_error,
                "healthy": self.healthy(), "updated_at": time.time()}

    def _write_status(self, force: bool = False) -> None:
        path = self.settings.status_file
        now = time.monotonic()
        if path is None or (not force and now - self._status_written < 0.5):
            return
        self._status_written = now
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(self.status()))
        os.replace(tmp, path)


def open_engine(kind: str, model_dir: str, *, max_model_len: int, seed: int = 0) -> RolloutEngine:
    """The worker's engine: vLLM (default) or transformers."""
    if kind == "hf":
        from easyvideor1.rollout.hf_engine import HFEngine

        return HFEngine(model_dir)
    from easyvideor1.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, max_model_len=max_model_len, seed=seed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m easyvideor1.rollout.worker",
                                description="Rollout worker: tasks from the work queue -> scored groups.")
    p.add_argument("--model", required=True, help="model directory of the engine (the run's base model)")
    p.add_argument("--queue", required=True, help="work queue URL (redis://host:port/db)")
    p.add_argument("--namespace", default="default", help="queue namespace (distributed.namespace)")
    p.add_argument("--reward-url", default="inprocess", help="reward service URL, or 'inprocess'")
    p.add_argument("--frame-store", default=None, help="frame store: http(s):// frame-cache service, s3://, or a dir")
    p.add_argument("--weights-store", default=None, help="root of the weights store (s3://bucket/prefix or a dir)")
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8, help="tasks leased per engine call")
    p.add_argument("--visibility-timeout", type=float, default=300.0,
                   help="seconds before a leased, unacked task is delivered to another worker")
    p.add_argument("--max-attempts", type=int, default=3, help="deliveries before a task is dead-lettered")
    p.add_argument("--weights-timeout", type=float, default=300.0, help="wait for a wanted policy version")
    p.add_argument("--reward-patience", type=float, default=120.0, help="retry scoring this long")
    p.add_argument("--status-file", default=None, help="write the worker's status JSON here")
    p.add_argument("--consumer", default="", help="consumer name (default host-pid-random)")
    return p


def main(argv: list[str] | None = None) -> int:
    from easyvideor1.cache import open_store
    from easyvideor1.queue import open_queue
    from easyvideor1.rewards.client import open_reward_client

    args = build_parser().parse_args(argv)
    engine = open_engine(args.engine, args.model, max_model_len=args.max_model_len, seed=args.seed)
    queue = open_queue(args.queue, args.namespace, visibility_timeout_s=args.visibility_timeout,
                       max_attempts=args.max_attempts)
    store = open_store(args.frame_store) if args.frame_store else None
    weights = EngineWeights(engine, args.model, board_url=args.queue, namespace=args.namespace,
                            weights_root=args.weights_store, timeout_s=args.weights_timeout)
    settings = WorkerSettings(consumer=args.consumer, batch_size=args.batch_size, reward_patience_s=args.reward_patience,
                              max_model_len=args.max_model_len, status_file=args.status_file)
    worker = RolloutWorker(engine, queue, open_reward_client(args.reward_url), frame_store=store, weights=weights,
                           settings=settings)

    def stop(signum, _frame) -> None:
        event(log, "rollout_worker_stopping", signal=signal.Signals(signum).name)
        worker.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        worker.run()
    finally:
        queue.close()
        worker.rewards.close()
        weights.close()
        if store is not None:
            store.close()
        engine.close()
    return 1 if worker.state == "failed" else 0


if __name__ == "__main__":
    raise SystemExit(main())
