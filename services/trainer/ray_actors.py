"""The trainer's FSDP ranks as Ray actors, behind the interface ``RLTrainer`` expects of an actor.

``RayActorGroup(cfg)`` reserves ``distributed.train_ranks`` bundles (``cpus_per_rank`` CPUs,
``gpus_per_rank`` GPUs) in one placement group, starts one :class:`RankActor` per bundle with
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set (rank 0's node and a free port
there; gloo on CPU, NCCL on GPU through ``init_world``) and builds train/actor.py's ``Actor``
in each. FSDP shards parameters, gradients and optimizer state; the batch is split too
(train/data_parallel.py): for log-probs the driver sends each rank its shard (balanced by
tokens) and puts the rows it gets back in batch order; for an update it fixes the whole PPO
schedule (``update_plan``) and sends each rank only the sequences of its share of every
mini-batch. With the actor's shared-prefix layout (``Actor.shared``, reported by the ranks at
setup) the driver splits as the in-process actor does: costs are tokens as laid out and every
group stays whole on one rank and in one mini-batch. The actor pads the ranks to equal micro-batch counts, so their collectives stay in
step. Update metrics (over all ranks), weights and checkpoints come from rank 0. A dead rank
or a call that outlives ``timeout_s`` raises :class:`RankError` naming the rank and the method.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from easyvideor1.config.schema import RunConfig
from easyvideor1.errors import ConfigError, EasyVideoR1Error
from easyvideor1.logging import event, get_logger
from easyvideor1.train.actor_group import ActorGroup
from easyvideor1.train.batching import laid_out_costs
from easyvideor1.train.data_parallel import RankShard, rank_view, shard_batch, update_plan

log = get_logger("services.trainer")


class RankError(EasyVideoR1Error):
    """A trainer rank died, failed or timed out."""


class RankActor:
    """One FSDP rank (a Ray actor)."""

    def __init__(self, cfg_json: str, rank: int, world_size: int, threads: int):
        import torch

        self.cfg = RunConfig.model_validate_json(cfg_json)
        self.rank, self.world_size = rank, world_size
        torch.set_num_threads(max(1, threads))
        self.actor: Any = None

    def endpoint(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0 hosts the process-group rendezvous)."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, master_addr: str, master_port: int) -> tuple[int, bool]:
        """Build the rank's actor; returns its pid and whether it lays groups out with a shared prefix."""
        from easyvideor1.models.inputs import PromptBuilder
        from easyvideor1.train.actor import Actor
        from easyvideor1.train.distributed import init_world
        from easyvideor1.train.trainer import seed_everything

        cfg = self.cfg
        # Ray gives each GPU actor its own CUDA_VISIBLE_DEVICES, so the local device is always 0.
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
                          MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
        world = init_world(cfg.trainer.device)
        seed_everything(cfg.trainer.seed + world.rank)
        tokenizer = PromptBuilder.from_pretrained(cfg.worker.actor.model_path).tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.actor = Actor.from_config(cfg, world, pad_token_id=pad)
        return os.getpid(), bool(self.actor.shared)

    def _main(self, value: Any) -> Any:
        return value if self.rank == 0 else None  # every rank computes it; one sends it back

    def compute_log_probs_shard(self, items: list, filler: Any, reference: bool) -> list:
        return self.actor.compute_log_probs_shard(items, filler=filler, reference=reference)

    def run_update(self, items: list, steps: list[RankShard]) -> Any:
        return self._main(self.actor.run_update(items, steps))

    def full_state_dict(self, dtype: Any = None) -> Any:
        return self._main(self.actor.full_state_dict(dtype))

    def load_full_state_dict(self, state: dict) -> None:
        self.actor.load_full_state_dict(state)

    def trainer_state(self) -> Any:
        return self._main(self.actor.trainer_state())

    def load_trainer_state(self, state: dict) -> None:
        self.actor.load_trainer_state(state)

    def export_hf(self, out_dir: str, processor: Any) -> Any:
        return self._main(str(self.actor.export_hf(out_dir, processor)))

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RayActorGroup(ActorGroup):
    """The trainer's :class:`~easyvideor1.train.actor_group.ActorGroup` as N FSDP ranks on Ray actors."""

    def __init__(self, cfg: RunConfig, *, ranks: int | None = None, timeout_s: float = 3600.0):
        dist = cfg.distributed
        self.world_size = ranks or dist.train_ranks
        self.timeout_s = timeout_s
        actor = cfg.worker.actor
        if self.world_size > 1 and actor.fsdp.enable == "off":
            # Nothing would average the ranks' gradients of their shards.
            raise ConfigError("distributed.train_ranks > 1 needs FSDP: worker.actor.fsdp.enable must be auto or on")
        self.ppo_epochs, self.mini_batch_size = actor.ppo_epochs, actor.mini_batch_size
        gpus = dist.gpus_per_rank
        if gpus is None:
            gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= self.world_size else 0.0
        bundle = {"CPU": dist.cpus_per_rank, **({"GPU": gpus} if gpus else {})}
        self.pg = placement_group([dict(bundle) for _ in range(self.world_size)], strategy="PACK")
        try:
            ray.get(self.pg.ready(), timeout=min(timeout_s, 300.0))
        except GetTimeoutError:
            remove_placement_group(self.pg)
            raise RankError(f"cannot place {self.world_size} trainer rank(s) of {bundle}: the cluster offers "
                            f"{ray.available_resources()} (lower distributed.train_ranks or cpus_per_rank)") from None
        remote = ray.remote(RankActor)
        cfg_json = cfg.model_dump_json()
        self.ranks = [
            remote.options(num_cpus=dist.cpus_per_rank, num_gpus=gpus, max_restarts=0,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(
                               placement_group=self.pg, placement_group_bundle_index=i))
            .remote(cfg_json, i, self.world_size, int(dist.cpus_per_rank))
            for i in range(self.world_size)]
        addr, port = self._get([self.ranks[0].endpoint.remote()], "endpoint")[0]
        ready = self._get([r.setup.remote(addr, port) for r in self.ranks], "setup")
        pids = [pid for pid, _ in ready]
        # Every rank loads the same model under the same config, so rank 0 speaks for all.
        self.shared = ready[0][1]
        event(log, "trainer_ranks_ready", ranks=self.world_size, bundle=bundle, master=f"{addr}:{port}", pids=pids,
              shared_prefix=self.shared)

    def _get(self, refs: list, method: str) -> list:
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except GetTimeoutError:
            raise RankError(f"trainer ranks did not finish {method} within {self.timeout_s:g}s") from None
        except RayActorError as exc:
            raise RankError(f"a trainer rank died during {method}: {exc}") from None
        except RayTaskError as exc:
            raise RankError(f"a trainer rank failed in {method}: {exc}") from None

    def _all(self, method: str, *args: Any) -> Any:
        return self._get([getattr(rank, method).remote(*args) for rank in self.ranks], method)[0]

    def compute_log_probs(self, items: Any, *, reference: bool = False) -> list:
        """Each rank forwards its shard; the rows come back in the order of ``items``."""
        items = list(items)
        shards = shard_batch(laid_out_costs(items, self.shared), self.world_size,
                             keys=[it.uid for it in items] if self.shared else None)
        # A rank's filler is its shortest sequence (the actor's default) unless it got none.
        parts = self._get([rank.compute_log_probs_shard.remote([items[i] for i in s.indices],
                                                                None if s.indices else items[s.filler], reference)
                           for rank, s in zip(self.ranks, shards)], "compute_log_probs")
        out: list = [None] * len(items)
        for shard, rows in zip(shards, parts):
            for index, row in zip(shard.indices, rows):
                out[index] = row
        return out

    def update(self, items: Any, *, seed: int) -> dict[str, float]:
        """The PPO schedule is fixed here; each rank gets the sequences of its share of it."""
        items = list(items)
        plan = update_plan(laid_out_costs(items, self.shared), [it.uid for it in items], seed=seed,
                           ppo_epochs=self.ppo_epochs, mini_batch_size=self.mini_batch_size,
                           world_size=self.world_size, whole_groups=self.shared)
        refs = []
        for r, rank in enumerate(self.ranks):
            needed, steps = rank_view([step[r] for step in plan])
            refs.append(rank.run_update.remote([items[i] for i in needed], steps))
        return self._get(refs, "update")[0]

    def full_state_dict(self, dtype: Any = None) -> dict[str, Any]:
        return self._all("full_state_dict", dtype)

    def load_full_state_dict(self, state: dict[str, Any]) -> None:
        self._all("load_full_state_dict", ray.put(state))

    def trainer_state(self) -> dict[str, Any]:
        return self._all("trainer_state")

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        self._all("load_trainer_state", ray.put(state))

    def export_hf(self, out_dir: Any, processor: Any) -> Any:
        from pathlib import Path

        return Path(self._all("export_hf", str(out_dir), ray.put(processor)))

    def close(self) -> None:
        """Leave the process group, end the actors and free the placement group (once)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            ray.get([rank.close.remote() for rank in self.ranks], timeout=30)
        except (GetTimeoutError, RayActorError, RayTaskError):
            pass  # a dead rank has nothing left to close
        for rank in self.ranks:
            ray.kill(rank)
        remove_placement_group(self.pg)
