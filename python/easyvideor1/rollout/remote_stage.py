"""Distributed mode's rollout stage: tasks over the work queue (its policy sync, weights via the
store, is :class:`~easyvideor1.weight_sync.remote.RemotePolicySync`).

:class:`RemoteRolloutStage` implements the trainer's :class:`~easyvideor1.rollout.stage.RolloutStage`
when ``distributed.mode == "distributed"`` (``train/parts.py`` assembles them). ``stage.run``
puts one task per sample (wire.py format: the run's reward settings travel with it) for the
rollout pool (rollout/worker.py), rebuilds every prompt locally with the trainer's own
builder and frame loader while the workers generate, and collects the scored groups:

* a result whose prompt token ids differ from the local ones is filtered (counted, logged);
* a result made by a policy more than ``distributed.staleness`` versions old (or by another
  run) is discarded, counted, and its task put again (at most ``max_requeues`` times);
* a dead-lettered task is reported as a filtered sample with the queue's reason;
* missing results after ``result_timeout_s`` raise :class:`RemoteRolloutTimeout` naming them;
* once a round has its groups, the results (and dead-letter records) it consumed are released
  (``queue.release``): Redis holds only uncollected results. A round that fails keeps its results,
  so a resumed run re-putting the same ids reuses them; an id already released is put again under
  a new id (``reput_after_release``), its result being gone;
* an unreachable queue is waited out for ``queue_patience_s``; once it answers, the tasks it
  lost are re-put (``queue.recover``) and the newest weight version is announced again.
  Otherwise :class:`QueueOutageError` says so; ``stage.recover()`` is the same recovery by hand.

Each run has an identity (rollout/remote_run.py): its task-id prefix, version board and prefix in
the weights store.

With tools on (``tools.enabled``) the tasks carry the tools settings and a result's multi-turn
trajectories arrive without pixels (wire.py): each tool medium is fetched again by its ref
through ``tool_source`` (a ToolFrameSource: the frame-cache service's tool endpoint in
distributed mode), checked against the rollout's record, and given its pixel tensors by the
trainer's builder; a trajectory whose media cannot be fetched or differ filters its sample
with the reason.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from easyvideor1.cache import FrameLoader
from easyvideor1.config.schema import MixPolicyConfig, RewardConfig, ToolsConfig
from easyvideor1.data import Sample
from easyvideor1.data.prepared import prepared_family
from easyvideor1.errors import CacheMismatchError, EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder, PromptInputs
from easyvideor1.models.trajectory import Trajectory
from easyvideor1.outages import outage_over, outage_started
from easyvideor1.prompts.renderer import PromptRenderer
from easyvideor1.queue import (
    DuplicateTaskError,
    QueueUnavailableError,
    ResultTimeoutError,
    TaskDeadLetteredError,
    WorkQueue,
)
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.remote_run import RunIdentity
from easyvideor1.rollout.stage import Group, RolloutStage, RoundResult, sample_fields
from easyvideor1.rollout.tools.base import ToolFrameSource, declaration_fields
from easyvideor1.rollout.tools.kit import tool_template_kwargs
from easyvideor1.rollout.tools.window import refetch as refetch_ref
from easyvideor1.rollout.wire import (
    WIRE_VERSION,
    WeightsRef,
    reward_from_dict,
    task_payload,
    trajectories_from_wire,
)

log = get_logger(__name__)


class RemoteRolloutError(EasyVideoR1Error):
    """The rollout pool did not deliver a round."""


class RemoteRolloutTimeout(RemoteRolloutError):
    pass


class QueueOutageError(RemoteRolloutError):
    pass


# ---- the stage ---------------------------------------------------------------------------------
@dataclass
class _Pending:
    k: int
    sample: Sample
    uid: str
    text: str
    payload: dict[str, Any]
    inputs: PromptInputs | None = None
    requeues: int = 0


class RemoteRolloutStage(RolloutStage):
    """Rounds generated and scored by the rollout pool (module docstring)."""

    def __init__(self, queue: WorkQueue, builder: PromptBuilder, loader: FrameLoader, renderer: PromptRenderer,
                 identity: RunIdentity, *, max_prompt_length: int, max_response_length: int,
                 reward: RewardConfig | None = None, staleness: int = 0,
                 result_timeout_s: float = 1800.0, queue_patience_s: float = 120.0, max_requeues: int = 3,
                 poll_s: float = 1.0, sweep_s: float = 10.0, tools: ToolsConfig | None = None,
                 tool_source: ToolFrameSource | None = None):
        self.queue, self.builder, self.loader, self.renderer = queue, builder, loader, renderer
        self.tools, self.tool_source = tools, tool_source
        self.identity = identity
        self.max_prompt_length, self.max_response_length = max_prompt_length, max_response_length
        self.reward = reward or RewardConfig()
        self.staleness, self.result_timeout_s, self.queue_patience_s = staleness, result_timeout_s, queue_patience_s
        self.max_requeues, self.poll_s, self.sweep_s = max_requeues, poll_s, sweep_s
        self.version = 0  # the trainer's current policy version (set by RemotePolicySync.push)
        self.on_recover: list[Callable[[], None]] = []
        self.totals: dict[str, float] = defaultdict(float)
        self._outstanding: dict[str, _Pending] = {}

    def task_id(self, uid: str, requeue: int = 0) -> str:
        return f"{self.identity.run_id}/{uid}" + (f"~r{requeue}" if requeue else "")

    def _weights(self) -> WeightsRef:
        return WeightsRef(self.identity.board, self.identity.store_prefix, max(0, self.version - self.staleness))

    def run(self, samples: Sequence[Sample], *, n: int, sampling: SamplingConfig, mix: MixPolicyConfig,
            uid_prefix: str) -> RoundResult:
        counters: dict[str, float] = defaultdict(float)
        filtered: list[tuple[str, str]] = []
        pending: dict[str, _Pending] = {}
        for k, sample in enumerate(samples):
            uid = f"{uid_prefix}-{k}-{sample.problem_id}"
            try:
                text = self.renderer.render(sample_fields(sample))
                too_long = self._too_long(sample)
            except EasyVideoR1Error as exc:
                filtered.append((sample.problem_id, f"{type(exc).__name__}: {exc}"))
                continue
            if too_long is not None:  # known without pixels: no task for the pool
                filtered.append((sample.problem_id, too_long))
                continue
            payload = task_payload(sample=sample, uid=uid, prompt_text=text, n=n, sampling=sampling, mix=mix,
                                   max_prompt_length=self.max_prompt_length,
                                   max_response_length=self.max_response_length,
                                   video_params=self.loader.video_params, image_params=self.loader.image_params,
                                   weights=self._weights(), reward=self.reward, tools=self.tools)
            pending[self.task_id(uid)] = _Pending(k, sample, uid, text, payload)
        self._outstanding = pending  # the same dict: what recover() re-puts
        started = time.perf_counter()
        for task_id, item in list(pending.items()):
            placed = self._put(task_id, item.payload, counters)
            if placed != task_id:
                pending[placed] = pending.pop(task_id)
        # Local prompts (identical tokens to the workers') are built while the pool generates.
        for task_id, item in list(pending.items()):
            try:
                item.inputs = self._local_inputs(item)
            except EasyVideoR1Error as exc:  # the worker will filter it too; its result is not needed
                filtered.append((item.sample.problem_id, f"{type(exc).__name__}: {exc}"))
                del pending[task_id]
        frames_s = time.perf_counter() - started
        groups: dict[int, Group] = {}
        deadline = time.monotonic() + self.result_timeout_s
        next_sweep = time.monotonic() + self.sweep_s
        collected: list[str] = []  # outcomes read (accepted, discarded or dead): released at the end
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._timeout(pending)
            if time.monotonic() >= next_sweep:  # a Redis restart can go unnoticed: redis-py reconnects
                self._guarded(lambda: self._sweep(counters), counters)
                next_sweep = time.monotonic() + self.sweep_s
            results, dead = self._wait(list(pending), min(self.poll_s, remaining), counters)
            for task_id, result in results.items():
                if task_id in pending:
                    collected.append(task_id)
                    self._accept(task_id, result, pending, groups, filtered, counters)
            for task_id, reason in dead.items():
                collected.append(task_id)
                item = pending.pop(task_id)
                counters["dead_lettered"] += 1
                filtered.append((item.sample.problem_id, f"dead-lettered by the rollout pool: {reason}"))
        # Only what this round read: results of tasks dropped before waiting (local prompt failed) stay.
        self._release(collected, counters)
        for problem_id, reason in filtered:
            event(log, "sample_filtered", problem_id=problem_id, reason=reason)
        for key, value in counters.items():
            self.totals[key] += value
        timings = {"frames_s": frames_s, "rollout_s": time.perf_counter() - started - frames_s, "reward_s": 0.0}
        timings.update({f"distributed/{k}": float(v) for k, v in counters.items() if k != "mix_groups"})
        ordered = [groups[k] for k in sorted(groups)]
        return RoundResult(ordered, filtered, timings, int(counters.get("mix_groups", 0)))

    # ---- pieces of a round ----------------------------------------------------------------
    def _local_inputs(self, item: _Pending) -> PromptInputs:
        """The prompt's token ids without pixels (models/expansion.py): from the metadata a
        prepared sample recorded, else from the frame loader's (the frames are not kept). The
        actor attaches pixels where it runs a forward (train/media.py ``PixelSource``)."""
        prepared = prepared_family(item.sample, self.builder.family.name)
        if prepared is not None:
            differences = prepared.param_differences(self.loader.video_params, self.loader.image_params)
            if differences:
                raise CacheMismatchError(f"sample {item.sample.problem_id!r} was prepared with other frame budgets "
                                         f"than this run's ({'; '.join(differences)}): prepare it again")
            videos, images = [m.metadata for m in prepared.videos], [m.metadata for m in prepared.images]
        else:
            videos = [self.loader.load_video(path)[1] for path in item.sample.videos]
            images = [self.loader.load_image(path)[1] for path in item.sample.images]
        if self.tools is None or not self.tools.enabled:
            return self.builder.expand(item.text, videos, images, sample_id=item.uid)
        # The worker's prompt declares the tools in the chat template: the same ids here.
        return self.builder.expand(item.text, videos, images, sample_id=item.uid,
                                   **declaration_fields(tool_template_kwargs(self.builder.family, self.tools)))

    def _too_long(self, sample: Sample) -> str | None:
        """Why a prepared sample's prompt cannot be sent (its recorded token count), else None."""
        prepared = prepared_family(sample, self.builder.family.name)
        if prepared is not None and prepared.prompt_tokens > self.max_prompt_length:
            return (f"prompt has {prepared.prompt_tokens} tokens (vision included, as prepared), more than "
                    f"data.max_prompt_length={self.max_prompt_length}")
        return None

    def _put(self, task_id: str, payload: dict[str, Any], counters: dict[str, float]) -> str:
        """Put a task; returns the id it is awaited under (``task_id`` unless that one was released)."""
        while True:
            try:
                self.queue.put(task_id, payload)
                return task_id
            except DuplicateTaskError as exc:
                if exc.state == "already collected":  # a run before a restart consumed it: the result is gone
                    counters["reput_after_release"] += 1
                    task_id = f"{task_id}~{uuid.uuid4().hex[:8]}"
                    continue
                # A result from before a trainer restart is checked like any.
                counters["reused_results" if exc.state == "already resulted" else "already_queued"] += 1
                return task_id
            except QueueUnavailableError as exc:
                self._ride_out(exc, counters)

    def _release(self, task_ids: list[str], counters: dict[str, float]) -> None:
        while True:
            try:
                counters["released"] += self.queue.release(task_ids)
                return
            except QueueUnavailableError as exc:  # once it answers: release what it still has
                self._ride_out(exc, counters)

    def _wait(self, ids: list[str], timeout: float, counters: dict[str, float]
              ) -> tuple[dict[str, Any], dict[str, str]]:
        try:
            return self.queue.wait_results(ids, timeout), {}
        except ResultTimeoutError as exc:
            return exc.results, {}
        except TaskDeadLetteredError as exc:
            return exc.results, exc.dead
        except QueueUnavailableError as exc:
            self._ride_out(exc, counters)
            return {}, {}

    def _guarded(self, action: Callable[[], Any], counters: dict[str, float]) -> None:
        try:
            action()
        except QueueUnavailableError as exc:
            self._ride_out(exc, counters)

    def _accept(self, task_id: str, result: dict[str, Any], pending: dict[str, _Pending], groups: dict[int, Group],
                filtered: list[tuple[str, str]], counters: dict[str, float]) -> None:
        item = pending.pop(task_id)
        version, board = result.get("policy_version"), result.get("board")
        ours = (result.get("v") == WIRE_VERSION and result.get("uid") == item.uid
                and result.get("problem_id") == item.sample.problem_id and board == self.identity.board)
        if not ours or not isinstance(version, int) or version > self.version \
                or self.version - version > self.staleness:
            counters["stale_discarded"] += 1
            event(log, "rollout_result_discarded", logging.WARNING, task_id=task_id, version=version, board=board,
                  trainer_version=self.version, staleness=self.staleness)
            if item.requeues >= self.max_requeues:
                filtered.append((item.sample.problem_id, f"results stayed older than the staleness bound "
                                 f"{self.staleness} after {item.requeues} re-puts"))
                return
            item.requeues += 1
            item.payload = dict(item.payload, weights=dataclasses.asdict(self._weights()))
            pending[self._put(self.task_id(item.uid, item.requeues), item.payload, counters)] = item
            return
        counters["redelivered"] += int(result.get("attempt", 1) > 1)
        for key, value in (result.get("counters") or {}).items():
            counters[f"worker_{key}"] += float(value)
        if result.get("status") == "filtered":
            filtered.append((item.sample.problem_id, str(result.get("reason"))))
            return
        assert item.inputs is not None
        if list(result["prompt_ids"]) != list(item.inputs.prompt_ids):
            counters["prompt_mismatch"] += 1
            reason = (f"prompt token ids of the rollout worker ({len(result['prompt_ids'])} tokens) differ from the "
                      f"trainer's ({len(item.inputs.prompt_ids)}): model, processor or frame settings disagree")
            event(log, "prompt_mismatch", logging.WARNING, task_id=task_id, reason=reason)
            filtered.append((item.sample.problem_id, reason))
            return
        extra: dict[str, Any] = {}
        if result.get("trajectories"):
            trajectories = self._trajectories(item, result["trajectories"], counters)
            if isinstance(trajectories, str):
                filtered.append((item.sample.problem_id, trajectories))
                return
            extra["trajectories"] = trajectories
        counters["mix_groups"] += int(bool(result.get("mix_injected")))
        groups[item.k] = Group(
            sample=item.sample, uid=item.uid, prompt=item.inputs, responses=[list(r) for r in result["responses"]],
            texts=list(result["texts"]), is_offline=list(result["is_offline"]),
            finish_reasons=list(result["finish_reasons"]), rewards=[reward_from_dict(r) for r in result["rewards"]],
            policy_version=version, **extra)

    def _trajectories(self, item: _Pending, wire: Any, counters: dict[str, float]
                      ) -> list[Trajectory | None] | str:
        """A result's trajectories with their media fetched again, or why the sample is filtered."""
        if "trajectories" not in {f.name for f in dataclasses.fields(Group)}:
            return "the rollout pool sent multi-turn trajectories and this trainer's Group cannot hold them"
        if self.tool_source is None:
            return "the rollout pool sent multi-turn trajectories and this stage has no tool frame source"
        try:
            out = trajectories_from_wire(wire, refetch=partial(refetch_ref, self.tool_source), builder=self.builder,
                                         where=f"sample {item.uid!r}")
        except EasyVideoR1Error as exc:  # TaskError, ToolRequestError/ToolSourceError, MediaError
            counters["trajectory_refetch_failed"] += 1
            return f"a trajectory's tool media cannot be fetched again: {type(exc).__name__}: {exc}"
        counters["trajectory_media_refetched"] += sum(len(t.media_refs) for t in out if t is not None)
        return out

    def _timeout(self, pending: dict[str, _Pending]) -> None:
        ids = sorted(pending)
        try:
            stats = self.queue.stats()
            state = f"queue: {stats.pending} queued, {stats.in_flight} leased"
        except EasyVideoR1Error as exc:
            state = f"queue stats unavailable: {exc}"
        shown = ", ".join(ids[:20]) + (" ..." if len(ids) > 20 else "")
        raise RemoteRolloutTimeout(
            f"{len(ids)} rollout result(s) missing after {self.result_timeout_s:g}s "
            f"(distributed.result_timeout_s) in namespace {self.queue.namespace!r}: {shown}; {state}. "
            "Is a rollout pool consuming this namespace (`evr1 status`, `evr1 serve rollout`)?")

    # ---- queue outages --------------------------------------------------------------------
    def _ride_out(self, first: QueueUnavailableError, counters: dict[str, float]) -> None:
        """Wait for the queue to answer again (bounded), then re-put what it lost."""
        began = outage_started("work queue (Redis)", f"waiting up to {self.queue_patience_s:g}s "
                               "(distributed.queue_patience_s), then re-putting what it lost",
                               error=str(first)[:300])
        deadline = time.monotonic() + self.queue_patience_s
        delay, last = 0.25, first
        while True:
            time.sleep(delay)
            try:
                self.queue.stats()
                break
            except QueueUnavailableError as exc:
                last = exc
            if time.monotonic() >= deadline:
                waiting = sorted(self._outstanding)
                raise QueueOutageError(
                    f"the work queue stayed unavailable for {self.queue_patience_s:g}s "
                    f"(distributed.queue_patience_s) with {len(waiting)} rollout task(s) outstanding "
                    f"({', '.join(waiting[:5])}{' ...' if len(waiting) > 5 else ''}): {last}. Recovery: bring Redis "
                    "back, then call stage.recover() (re-puts the tasks Redis lost, queue.recover) and run the round "
                    "again, or restart the trainer: it resumes from its last checkpoint and finished results "
                    "are reused") from None
            delay = min(delay * 2, 2.0)
        before = counters.get("queue_recovered", 0)
        self._sweep(counters)
        outage_over("work queue (Redis)", began, counters,
                    tasks_put_again=int(counters.get("queue_recovered", 0) - before))

    def _sweep(self, counters: dict[str, float]) -> None:
        counters["queue_recovered"] += len(self.recover())

    def recover(self) -> list[str]:
        """Re-put the outstanding tasks the queue no longer knows (neither queued, leased, resulted nor
        dead-lettered: a Redis restart without persistence) and announce the newest weights again.
        Released tasks are never outstanding (and the queue refuses them), so none is re-put."""
        dead = {d.task_id for d in self.queue.dead_letters()} if self._outstanding else set()
        requeued = self.queue.recover({tid: item.payload for tid, item in self._outstanding.items()
                                       if tid not in dead})
        for callback in self.on_recover:
            callback()
        if requeued:
            event(log, "rollout_tasks_recovered", logging.WARNING, requeued=len(requeued),
                  outstanding=len(self._outstanding))
        return requeued

    def close(self) -> None:
        self.queue.close()
        if self.tool_source is not None:
            self.tool_source.close()
