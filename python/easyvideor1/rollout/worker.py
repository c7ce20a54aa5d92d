"""The rollout worker: tasks from the work queue -> n scored responses -> results.

One worker drives one engine. Each loop leases up to ``batch_size`` tasks (wire.py format),
keeps the engine on the policy the tasks ask for (:class:`EngineWeights`), runs the same
:class:`~easyvideor1.rollout.stage.EngineRolloutStage` the embedded trainer runs (frames from
the frame store, falling back to decoding, counted; mix-policy; rewards through the reward
client) and stores each group with ``put_result`` *before* ``ack``: a worker that dies in
between leaves its leases to expire, and the tasks are delivered again (a second result for a
task is dropped by the queue). While the worker lives, a heartbeat thread (:class:`LeaseRenewer`)
renews the leases of exactly the tasks in hand every ``serve.rollout.lease_s / 3``, so a slow
generation keeps its tasks (up to ``serve.rollout.visibility_timeout_s``) and a dead worker's
tasks go to another worker about ``lease_s`` after it died. A task that cannot be used
(malformed payload or sample, or one that fails alone) is nacked with the reason, and
dead-lettered after the queue's max attempts.

Each task carries its run's scoring settings (``worker.reward``); the worker scores it with a
reward client opened for exactly those settings (the pool's reward URL, or in-process).

Run as a process: ``python -m easyvideor1.rollout.worker --config RUN.yaml ...`` (``--help``,
rollout/worker_cli.py: ``build_worker``); the Ray Serve pool (services/rollout) builds the same.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from easyvideor1.cache import FrameLoader, FrameStore
from easyvideor1.config.schema import RewardConfig, RolloutPoolConfig, ToolsConfig
from easyvideor1.logging import event, get_logger
from easyvideor1.queue import LeaseRenewer, Message, QueueUnavailableError, WorkQueue
from easyvideor1.rewards.client import RewardClient, RewardServiceError, open_reward_client
from easyvideor1.rollout.base import RolloutEngine
from easyvideor1.rollout.tools.base import ToolFrameSource
from easyvideor1.rollout.tools.frames import LocalToolFrameSource
from easyvideor1.rollout.tools.kit import VideoToolKit
from easyvideor1.rollout.wire import RolloutTask, TaskError, filtered_payload, parse_task, result_payload
from easyvideor1.weight_sync.follower import EngineWeights

log = get_logger("rollout.worker")
# Worker counter -> FrameLoader counter.
_LOADER_COUNTERS = {"frame_hits": "hits", "frame_decodes": "misses", "frame_store_errors": "fallbacks_store_error"}


class WorkerBroken(RuntimeError):
    """The worker cannot do any task (its engine fails on each alone): it stops and reports failed."""


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


class RewardClients:
    """One patient reward client per distinct scoring settings, all on the pool's reward URL."""

    def __init__(self, url: str | None, patience_s: float, stop: threading.Event, keep: int = 8):
        self.url, self.patience_s, self.stop, self.keep = url, patience_s, stop, keep
        self._clients: dict[str, PatientRewards] = {}

    def get(self, config: RewardConfig) -> PatientRewards:
        key = json.dumps(config.scoring_fields(), sort_keys=True)
        client = self._clients.pop(key, None)
        if client is None:
            client = PatientRewards(open_reward_client(self.url, config), self.patience_s, self.stop)
            while len(self._clients) >= self.keep:  # the least recently used goes
                self._clients.pop(next(iter(self._clients))).close()
        self._clients[key] = client
        return client

    @property
    def retries(self) -> int:
        return sum(c.retries for c in self._clients.values())

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class _TaskPrompts:
    """Renderer stand-in: the trainer rendered each prompt; the worker uses that exact text."""

    def __init__(self, texts: dict[str, str]):
        self.texts = texts

    def render(self, fields: dict[str, Any]) -> str:
        return self.texts[fields["problem_id"]]


class RolloutWorker:
    # Loop tuning, not run settings: the lease wait, how long a batch may fill after its first
    # task, and how many failures in a row mean the worker (not a task) is broken.
    block_s = 1.0
    linger_s = 0.05
    max_consecutive_errors = 20
    max_task_failures = 5

    def __init__(self, engine: RolloutEngine, queue: WorkQueue, reward_url: str | None, *,
                 frame_store: FrameStore | None, weights: EngineWeights, pool: RolloutPoolConfig | None = None,
                 max_model_len: int | None = None, consumer: str = "", status_file: str | None = None,
                 tool_source: Callable[[FrameLoader], ToolFrameSource] | None = None):
        """``reward_url``: the reward service every task is scored by (None: in-process); ``pool``:
        the run config's ``serve.rollout``; ``max_model_len``: the engine's (longer prompts are filtered);
        ``tool_source``: where a task with tools on gets its tool frames, given the task's frame loader
        (default: decoded here over that loader; the worker command passes the run's
        ``make_tool_frame_source``, the frame-cache service in distributed mode)."""
        self.engine, self.queue, self.frame_store, self.weights = engine, queue, frame_store, weights
        self.pool = pool or RolloutPoolConfig()
        self.max_model_len, self.status_file = max_model_len, status_file
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.stop_event = threading.Event()
        self.rewards = RewardClients(reward_url, self.pool.reward_patience_s, self.stop_event)
        self.counters: dict[str, float] = defaultdict(float)
        self.state = "ready"
        self.last_error: str | None = None
        self._holding: list[str] = []
        self.leases = LeaseRenewer(queue)  # renews what step() holds, until each is acked or nacked
        self._loaders: dict[str, FrameLoader] = {}
        self._tool_source = tool_source
        self._kits: dict[str, VideoToolKit] = {}  # one per (tools settings, loader): the tasks' runs
        self._thread: threading.Thread | None = None
        self._status_written = 0.0
        self._task_failures = 0

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
        event(log, "rollout_worker_started", consumer=self.consumer, queue=repr(self.queue))
        try:
            while not self.stop_event.is_set():
                try:
                    self.step()
                    backoff, errors = 0.5, 0
                    continue
                except QueueUnavailableError as exc:
                    self.state, self.last_error = "waiting_for_queue", str(exc)
                    self.counters["queue_outages"] += 1
                except WorkerBroken as exc:  # e.g. a dead engine: stop taking tasks, let a supervisor replace us
                    self.state, self.last_error = "failed", str(exc)
                    log.error("rollout worker gives up: %s", exc)
                    return
                except Exception as exc:
                    errors += 1
                    self.state, self.last_error = "error", f"{type(exc).__name__}: {exc}"
                    self.counters["loop_errors"] += 1
                    log.exception("rollout worker step failed (%d in a row)", errors)
                    if errors >= self.max_consecutive_errors:
                        self.state = "failed"
                        return
                event(log, "rollout_worker_backoff", logging.WARNING, error=str(self.last_error)[:300],
                      retry_s=backoff)
                self._write_status(force=True)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            self.leases.close()  # whatever is still leased runs out and goes to another worker
            if self.state != "failed":
                self.state = "stopped"
            self._write_status(force=True)
            event(log, "rollout_worker_stopped", consumer=self.consumer, state=self.state)

    def step(self) -> int:
        """Lease and handle one batch; returns the number of messages handled."""
        self.state = "ready"
        self._write_status()
        batch, consumer = self.pool.batch_size, self.consumer
        messages = self.queue.get(consumer, count=batch, block_s=self.block_s)
        if not messages:
            return 0
        try:
            self.leases.hold(messages)
            # Tasks of one round arrive one put at a time: wait a moment for the rest of a batch,
            # since one engine call for many prompts costs little more than for one.
            deadline = time.monotonic() + self.linger_s
            while len(messages) < batch and (left := deadline - time.monotonic()) > 0:
                more = self.queue.get(consumer, count=batch - len(messages), block_s=left)
                if not more:
                    break
                self.leases.hold(more)
                messages += more
            self.state, self._holding = "working", [m.task_id for m in messages]
            self._write_status(force=True)
            self._process(messages)
        finally:
            # Acks and nacks dropped theirs already; the rest (an error left them) are let expire.
            self.leases.drop(messages)
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
                self.leases.drop([message])
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
        from easyvideor1.rollout.stage import EngineRolloutStage  # the embedded code path, reused as is

        first = batch[0][1]
        weights_started = time.perf_counter()
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
        if self.max_model_len is not None:
            max_prompt = min(max_prompt, self.max_model_len - first.sampling.max_tokens)
        prompts = _TaskPrompts({t.sample.problem_id: t.prompt_text for _, t in batch})
        tools = first.tools if first.tools is not None and first.tools.enabled else None
        stage = EngineRolloutStage(self.engine, loader, prompts, self.rewards.get(first.reward), max_prompt_length=max_prompt,
                                   max_response_length=first.max_response_length, tools=tools,
                                   kit=self._kit(tools, loader) if tools is not None else None)
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
            self._task_failures += 1
            if self._task_failures >= self.max_task_failures:
                raise WorkerBroken(f"{self._task_failures} tasks in a row failed alone; last: {exc}") from exc
            return
        self._task_failures = 0
        after = loader.stats()
        deltas = {name: after[field] - before[field] for name, field in _LOADER_COUNTERS.items()}
        for name, value in deltas.items():
            self.counters[name] += value
        share = 1.0 / len(batch)  # per-task share of the batch's counters: their sum is the batch's
        counters = {name: value * share for name, value in deltas.items()}
        counters["seconds"] = (time.perf_counter() - started) * share
        counters["weights_seconds"] = (started - weights_started) * share  # loading a new policy, if any
        event(log, "rollout_batch_done", tasks=len(batch), groups=len(result.groups), filtered=len(result.filtered),
              version=version, seconds=round(time.perf_counter() - started, 3), **result.timings)
        groups = {g.uid: g for g in result.groups}
        filtered = dict(result.filtered)
        common = {"worker": self.consumer, "board": first.weights.board, "counters": counters}
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

    def close_tools(self) -> None:
        """Close the tool kits' frame sources (HTTP sessions to the frame-cache service)."""
        for kit in self._kits.values():
            kit.close()
        self._kits.clear()

    def _kit(self, tools: ToolsConfig, loader: FrameLoader) -> VideoToolKit:
        """The tool kit for a task's tools settings (cached per settings and frame loader)."""
        key = f"{tools.model_dump_json()}|{id(loader)}"
        kit = self._kits.get(key)
        if kit is None:
            source = self._tool_source(loader) if self._tool_source is not None \
                else LocalToolFrameSource(loader, self.engine.family)
            kit = self._kits[key] = VideoToolKit(self.engine.family, source, tools)
        return kit

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
                acked = self.queue.ack(message)
                self.leases.drop([message])
                if acked:
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
        self.leases.drop([message])  # given back either way: by the nack, or by letting the lease run out
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
        counters["lease_renewals"] = float(self.leases.renewals)
        counters["leases_expired"] = float(self.leases.lost)  # held but taken back (or at the cap)
        return {"state": self.state, "consumer": self.consumer, "pid": os.getpid(),
                "engine_version": int(getattr(self.engine, "policy_version", 0)), "board": self.weights.board,
                "holding": list(self._holding), "counters": counters, "last_error": self.last_error,
                "healthy": self.healthy(), "updated_at": time.time()}

    def _write_status(self, force: bool = False) -> None:
        path = self.status_file
        now = time.monotonic()
        if path is None or (not force and now - self._status_written < 0.5):
            return
        self._status_written = now
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(self.status()))
        os.replace(tmp, path)


if __name__ == "__main__":  # python -m easyvideor1.rollout.worker
    from easyvideor1.rollout.worker_cli import main

    raise SystemExit(main())
