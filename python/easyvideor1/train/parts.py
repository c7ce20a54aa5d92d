"""The parts of an RL run, assembled from the run config by :func:`build_parts`: the one place
that knows the two modes.

====================  ==========================================  =============================================
part                  embedded                                    distributed (``distributed.mode``)
====================  ==========================================  =============================================
rollout stage         ``EngineRolloutStage`` on an engine here     ``RemoteRolloutStage``: tasks to the rollout pool
policy sync           ``EnginePolicySync``: weights in place       ``RemotePolicySync``: weights store + board
actor group           ``Actor`` in this process                    ``Actor`` here, or the Ray trainer's ranks
====================  ==========================================  =============================================

``RLTrainer`` receives a :class:`TrainerParts` and never asks which mode it is in; the tool
frames' source of the actor's ranks (which fetch a trajectory's tool media again in their own
process) comes from :func:`tool_frames_url`, this module's too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from easyvideor1.cache import FrameLoader
from easyvideor1.config.cluster import apply_cluster_defaults
from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError
from easyvideor1.logging import event, get_logger
from easyvideor1.models.inputs import PromptBuilder
from easyvideor1.prompts.renderer import PromptRenderer
from easyvideor1.rollout.base import RolloutEngine
from easyvideor1.rollout.stage import RolloutStage
from easyvideor1.train.actor_group import ActorGroup
from easyvideor1.train.distributed import World, init_world
from easyvideor1.train.media import build_frame_loader
from easyvideor1.weight_sync.policy import PolicySync

log = get_logger(__name__)


@dataclass
class TrainerParts:
    world: World
    builder: PromptBuilder
    loader: FrameLoader
    stage: RolloutStage
    policy_sync: PolicySync
    actor: ActorGroup
    owned: list[Any] = field(default_factory=list)  # closed with the parts, last made first

    def close(self) -> None:
        for part in reversed(self.owned):
            part.close()
        self.owned.clear()


def build_parts(cfg: RunConfig, *, engine: RolloutEngine | None = None, actor: ActorGroup | None = None
                ) -> TrainerParts:
    """The run's parts. ``engine``: an embedded engine the caller keeps (and closes); ``actor``: a
    group of ranks made elsewhere (the Ray trainer's), else an in-process :class:`Actor`."""
    world = init_world(cfg.trainer.device)
    owned: list[Any] = []
    try:
        if cfg.distributed.mode == "distributed":
            if engine is not None:
                raise ConfigError("distributed mode rolls out on the rollout pool: do not pass an engine")
            builder, loader, stage, sync = remote_rollout_parts(cfg, owned)
        else:
            builder, loader, stage, sync = _embedded(cfg, engine, owned)
        if actor is None:
            from easyvideor1.train.actor import Actor

            tokenizer = builder.tokenizer
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            actor = Actor.from_config(cfg, world, pad_token_id=pad)
            owned.append(actor)
    except BaseException:
        for part in reversed(owned):
            part.close()
        raise
    return TrainerParts(world, builder, loader, stage, sync, actor, owned)


def tool_frames_url(cfg: RunConfig) -> str | None:
    """Where the video tools' frames come from: the frame-cache service (``distributed.frame_cache_url``)
    in distributed mode, so a trainer needs no raw media; ``None``: this process's store."""
    return cfg.distributed.frame_cache_url if cfg.distributed.mode == "distributed" else None


def _embedded(cfg: RunConfig, engine: RolloutEngine | None, owned: list[Any]):
    from easyvideor1.rewards.client import open_reward_client
    from easyvideor1.rollout.factory import make_engine, max_prompt_length
    from easyvideor1.rollout.stage import EngineRolloutStage
    from easyvideor1.weight_sync.policy import EnginePolicySync

    rollout = cfg.worker.rollout
    # Colocated: the engine sleeps while the actor computes log-probs and updates (one GPU for both).
    sync = EnginePolicySync(engine or make_engine(cfg), owns_engine=engine is None, colocate=rollout.colocate,
                            sleep_level=rollout.sleep_level, bucket_bytes=rollout.weight_sync.bucket_mib << 20)
    owned.append(sync)
    rewards = open_reward_client(cfg.worker.reward.url, cfg.worker.reward)
    owned.append(rewards)
    loader = build_frame_loader(cfg, sync.engine.family)
    kit = None
    if rollout.tools.enabled:
        from easyvideor1.rollout.tools.frames import make_tool_frame_source
        from easyvideor1.rollout.tools.kit import make_tool_kit

        # The tools read through the run's loader: its store, hash index and counters.
        kit = make_tool_kit(cfg, sync.engine.family,
                            source=make_tool_frame_source(cfg, sync.engine.family, loader=loader))
        owned.append(kit)
    stage = EngineRolloutStage(sync.engine, loader, PromptRenderer(cfg.data.prompt_template_dir), rewards,
                               max_prompt_length=max_prompt_length(cfg),
                               max_response_length=cfg.data.max_response_length, tools=rollout.tools, kit=kit)
    return sync.engine.builder, loader, stage, sync


def remote_rollout_parts(cfg: RunConfig, owned: list[Any]):
    """Distributed mode's builder, loader, stage and policy sync (appended to ``owned``)."""
    from easyvideor1.queue import open_queue
    from easyvideor1.rollout.remote_run import RunIdentity
    from easyvideor1.rollout.remote_stage import RemoteRolloutStage
    from easyvideor1.train.checkpoint import latest_checkpoint
    from easyvideor1.weight_sync.remote import RemotePolicySync

    cfg, store_options = apply_cluster_defaults(cfg)
    dist = cfg.distributed
    missing = [name for name in ("queue_url", "weights_store") if getattr(dist, name) is None]
    if missing:
        raise ConfigError(f"distributed mode needs distributed.{' and distributed.'.join(missing)} "
                          "(or a cluster started with `evr1 up`)")
    builder = PromptBuilder.from_pretrained(cfg.worker.actor.model_path)
    if cfg.data.frame_cache.store is None and dist.frame_cache_url:
        # The trainer reads the frames the pool reads: through the frame-cache service, warming
        # it for the run's files first (as for a configured store).
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={
            "frame_cache": cfg.data.frame_cache.model_copy(update={"store": dist.frame_cache_url})})})
    loader = build_frame_loader(cfg, builder.family)
    resuming = cfg.trainer.resume == "auto" and latest_checkpoint(cfg.trainer.output_dir) is not None
    identity = RunIdentity.for_run(cfg, resuming=resuming)
    tools = cfg.worker.rollout.tools
    tool_source = None
    if tools.enabled:
        # Trajectories come back without their tool media; the trainer fetches them again by ref.
        from easyvideor1.rollout.tools.frames import make_tool_frame_source

        tool_source = make_tool_frame_source(cfg, builder.family, loader=loader, service_url=tool_frames_url(cfg))
    stage = RemoteRolloutStage(open_queue(dist.queue_url, dist.namespace), builder, loader,
                               PromptRenderer(cfg.data.prompt_template_dir), identity,
                               max_prompt_length=cfg.data.max_prompt_length,
                               max_response_length=cfg.data.max_response_length, reward=cfg.worker.reward,
                               staleness=dist.staleness, result_timeout_s=dist.result_timeout_s,
                               queue_patience_s=dist.queue_patience_s, max_requeues=dist.max_requeues,
                               tools=tools if tools.enabled else None, tool_source=tool_source)
    owned.append(stage)
    sync = RemotePolicySync(cfg, stage, identity, store_options)
    owned.append(sync)
    event(log, "remote_rollout_ready", namespace=dist.namespace, run_id=identity.run_id, board=identity.board,
          queue=dist.queue_url.split("@")[-1], weights=dist.weights_store)
    return builder, loader, stage, sync
