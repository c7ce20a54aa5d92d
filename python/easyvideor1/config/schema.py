"""The one typed config tree of a training run.

Every field has a default and a description; unknown keys are errors (``extra="forbid"``).
Defaults follow the paper's recipe: DAPO clip 0.2/0.28, KL off, n=8, 2 fps, <=128 frames,
262144 px per video frame, 1048576 px per image, lr 1e-6.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _path_list(value: object) -> object:
    """A list of paths may be given as one string (a flag): comma-separated."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class FrameCacheConfig(Section):
    store: str | None = Field(None, description="Frame store URL (a directory, file://DIR or s3://bucket/prefix); "
                              "null decodes every video on the fly.")
    write_back: bool = Field(False, description="On a miss, write the decoded frames into the store.")
    build_before_training: bool = Field(True, description="Build missing cache entries for the train/val "
                                        "files before step 0 (embedded mode).")
    workers: int = Field(2, ge=1, description="Parallel decode workers when building the cache.")
    decode_timeout_s: float = Field(120.0, gt=0, description="Per-video decode time limit while building.")


class DataConfig(Section):
    train_files: str = Field("", description="Training data: a JSON or JSONL file in the project's format.")
    val_files: str | None = Field(None, description="Held-out data for validation (greedy decoding).")
    media_root: str | None = Field(None, description="Folder that relative media paths resolve against "
                                   "(default: the data file's folder).")
    image_min_pixels: int = Field(4 * 28 * 28, gt=0, description="Lower pixel budget per image.")
    image_max_pixels: int = Field(1048576, gt=0, description="Upper pixel budget per image.")
    video_min_pixels: int = Field(128 * 28 * 28, gt=0, description="Lower pixel budget per video frame.")
    video_max_pixels: int = Field(262144, gt=0, description="Upper pixel budget per video frame.")
    video_max_frames: int = Field(128, gt=0, description="Most frames sampled from one video.")
    video_min_frames: int = Field(4, gt=0, description="Fewest frames sampled from one video.")
    video_fps: float = Field(2.0, gt=0, description="Frames sampled per second of video.")
    max_prompt_length: int = Field(16384, gt=0, description="Longest prompt in tokens (vision tokens "
                                   "included); longer samples are filtered with a reported reason.")
    max_response_length: int = Field(1024, gt=0, description="Most tokens generated per response.")
    rollout_batch_size: int = Field(32, gt=0, description="Questions per RL step (each gets n responses).")
    val_batch_size: int = Field(64, gt=0, description="Questions per validation batch.")
    shuffle: bool = Field(True, description="Shuffle the training set every epoch.")
    seed: int = Field(1, description="Seed of the data order.")
    prompt_template_dir: str | None = Field(None, description="Folder of Jinja2 templates overriding the "
                                            "built-in per-problem-type prompts.")
    media_roots: list[str] = Field(default_factory=list, description="evr1 data prepare: local media are "
                                   "decoded only when their resolved path (symlinks and '..' followed) is under "
                                   "one of these folders; a row naming another file is left out and reported "
                                   "([]: no restriction, the data file on the command line is trusted).")
    media_buckets: list[str] = Field(default_factory=list, description="evr1 data prepare: s3:// media are "
                                     "fetched only from these buckets (names, or s3://bucket/prefix); [] with "
                                     "media_roots set: none; both []: no restriction.")

    _media_lists = field_validator("media_roots", "media_buckets", mode="before")(_path_list)
    frame_cache: FrameCacheConfig = Field(default_factory=FrameCacheConfig)

    @model_validator(mode="after")
    def _budgets(self) -> DataConfig:
        if self.image_min_pixels > self.image_max_pixels:
            raise ValueError("data.image_min_pixels must be <= data.image_max_pixels")
        if self.video_min_pixels > self.video_max_pixels:
            raise ValueError("data.video_min_pixels must be <= data.video_max_pixels")
        if self.video_min_frames > self.video_max_frames:
            raise ValueError("data.video_min_frames must be <= data.video_max_frames")
        return self


class KLConfig(Section):
    enable: bool = Field(False, description="Use a reference model and a KL term at all. Off: no "
                         "reference model is loaded.")
    kind: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = Field(
        "low_var_kl", description="KL estimator.")
    use_as: Literal["loss", "reward"] = Field("loss", description="Add the KL to the loss, or subtract it "
                                              "from the token rewards.")
    coef: float = Field(1e-2, ge=0, description="KL coefficient (initial value when adaptive).")
    adaptive: bool = Field(False, description="Adaptive KL controller (reward-penalty use only).")
    target: float = Field(0.1, gt=0, description="Target KL of the adaptive controller.")
    horizon: int = Field(10000, gt=0, description="Horizon of the adaptive controller.")

    @model_validator(mode="after")
    def _usage(self) -> KLConfig:
        if self.enable and self.use_as == "reward" and self.kind == "full":
            raise ValueError("algorithm.kl.kind 'full' needs logits and cannot be used as a reward penalty "
                             "(use_as=reward): use a per-token estimator")
        if self.enable and self.adaptive and self.use_as != "reward":
            raise ValueError("algorithm.kl.adaptive applies to use_as=reward only")
        return self


class DynamicSamplingConfig(Section):
    enable: bool = Field(False, description="DAPO online filtering: drop groups whose mean metric is 0 or 1.")
    metric: str = Field("accuracy", description="Reward key averaged per group (accuracy, overall, format).")
    low: float = Field(0.0, description="Keep groups with mean strictly above this.")
    high: float = Field(1.0, description="Keep groups with mean strictly below this.")
    max_tries: int = Field(4, ge=1, description="Extra batches drawn to refill before giving up with an error.")


class OverlongPenaltyConfig(Section):
    enable: bool = Field(False, description="DAPO soft overlong punishment.")
    buffer_length: int = Field(256, gt=0, description="Length of the linear penalty ramp before the limit.")
    penalty_factor: float = Field(1.0, ge=0, description="Penalty at the hard limit.")


class MixPolicyConfig(Section):
    enable: bool = Field(False, description="Put a sample's offline trajectory in the last slot of its group.")
    mode: Literal["always", "conditional"] = Field("always", description="conditional: only when the "
                                                   "online group's accuracy is below the threshold.")
    accuracy_threshold: float = Field(0.5, gt=0, le=1, description="Threshold of the conditional mode.")
    offline_loss: Literal["policy", "weighted_nll"] = Field(
        "policy", description="The offline response's loss. policy: the policy loss, as an online one (its ratio "
        "against the recomputed old log-probs, clipped); weighted_nll: -advantage x log-prob per token, no ratio "
        "and no clip (the clip keeps an update near the policy that sampled, and no policy sampled an offline "
        "response), so a demonstration the policy finds unlikely is learnt at the rate of supervised learning.")

    @property
    def conditional(self) -> bool:
        return self.enable and self.mode == "conditional"


class AlgorithmConfig(Section):
    adv_estimator: Literal["grpo", "dr_grpo", "grpo_passk", "rloo", "reinforce_plus_plus",
                           "reinforce_plus_plus_baseline", "remax", "gdpo"] = Field(
        "grpo", description="Advantage estimator (docs/algorithms.md).")
    policy_loss: Literal["ppo", "gspo", "gspo_token", "cispo"] = Field("ppo", description="Policy loss.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                           "seq-mean-token-sum-norm"] = Field("token-mean", description="Loss aggregation.")
    clip_ratio_low: float = Field(0.2, ge=0, description="Lower PPO clip (1 - eps_low).")
    clip_ratio_high: float = Field(0.28, ge=0, description="Upper PPO clip (1 + eps_high), DAPO clip-higher.")
    clip_ratio_dual: float = Field(3.0, gt=1, description="Dual-clip bound c for negative advantages.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount of REINFORCE++ returns.")
    norm_eps: float = Field(1e-6, gt=0, description="Added to the group std in GRPO.")
    gdpo_weights: dict[str, float] = Field(default_factory=lambda: {"accuracy": 1.0, "format": 1.0},
                                           description="Reward components and weights for gdpo.")
    kl: KLConfig = Field(default_factory=KLConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlong_penalty: OverlongPenaltyConfig = Field(default_factory=OverlongPenaltyConfig)
    mix_policy: MixPolicyConfig = Field(default_factory=MixPolicyConfig)


class FSDPConfig(Section):
    enable: Literal["auto", "on", "off"] = Field("auto", description="auto: FSDP2 when world size > 1.")
    cpu_offload: bool = Field(False, description="Offload parameters and optimizer state to CPU.")
    mixed_precision: Literal["bf16", "fp32"] = Field("bf16", description="Compute dtype on GPU, sharded or "
                                                     "not (CPU always runs fp32).")


class OptimConfig(Section):
    lr: float = Field(1e-6, gt=0, description="Learning rate.")
    weight_decay: float = Field(1e-2, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="LR schedule after warm-up.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Final LR as a fraction of lr (cosine/linear).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")


class ActorConfig(Section):
    model_path: str = Field("", description="Hugging Face model directory of the policy.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    mini_batch_size: int = Field(16, ge=1, description="Questions per optimizer step (x n responses).")
    micro_batch_token_budget: int = Field(32768, gt=0, description="Most tokens per forward micro-batch "
                                          "(dynamic batching).")
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward.")
    freeze_vision_tower: bool = Field(False, description="Keep the vision encoder's weights (patch embedding, "
                                      "blocks, merger) fixed: only the language model trains.")
    keep_activations_lm: float = Field(0.0, ge=0, le=1, description="With checkpointing: fraction of decoder "
                                       "layers whose activations are kept instead (memory for speed).")
    keep_activations_vision: float = Field(0.0, ge=0, le=1, description="With checkpointing: fraction of "
                                           "vision blocks whose activations are kept instead.")
    keep_policy: Literal["auto", "fixed", "adaptive"] = Field(
        "auto", description="With checkpointing: fixed uses keep_activations_lm/vision; adaptive chooses per "
        "micro-batch how many layers keep their activations from the free accelerator memory and the "
        "micro-batch's tokens and patches (models/checkpointing.py); auto: adaptive on CUDA, fixed elsewhere.")
    activation_budget_gib: float | None = Field(None, gt=0, description="Adaptive keep policy: GiB a "
                                                "micro-batch's activations may take (null: the free "
                                                "accelerator memory at its start, less a 10% margin).")
    attention: Literal["auto", "sdpa", "packed"] = Field("auto", description="packed: all vision windows of a "
                                                         "layer in one kernel (models/attention.py); auto: "
                                                         "packed on CUDA, sdpa on CPU.")
    compile: bool = Field(False, description="torch.compile each decoder layer and vision block (GPU).")
    padding_free: bool = Field(False, description="Pack the sequences of a micro-batch into one row, no "
                               "padding (causal attention kept per sequence by the packed attention).")
    shared_prefix: bool = Field(True, description="Lay each group's prompt out once per micro-batch, its "
                                "responses after it, each attending to the prompt and itself: the vision "
                                "tower and the prompt run once per group, log-probs and gradients unchanged "
                                "(models/packing.py). Needs the packed attention (not attention: sdpa) and a "
                                "model without recurrent layers (not Qwen3.5); elsewhere it is off.")
    recompute_old_log_probs: bool = Field(True, description="Recompute old log-probs with the trainer's "
                                          "forward (otherwise use the engine's).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")
    skip_nonfinite_updates: bool = Field(True, description="Skip an optimizer step whose gradient norm "
                                         "is not finite.")
    optim: OptimConfig = Field(default_factory=OptimConfig)
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)


class ToolsConfig(Section):
    """Multi-turn rollouts in which the policy calls video tools over the frame store (docs/tools.md)."""

    enabled: bool = Field(False, description="Declare get_frames/zoom to the policy and run multi-turn rollouts "
                          "(training, validation and `evr1 eval --tools`).")
    max_turns: int = Field(3, ge=1, description="Most tool calls in one trajectory; a call past it gets a tool "
                           "message saying so and the policy must answer.")
    frames_per_call: int = Field(8, ge=1, description="Most frames one get_frames call returns (a longer window "
                                 "or a higher fps is thinned to this).")
    frames_per_trajectory: int = Field(16, ge=1, description="Most frames (zoom crops included) all tool calls "
                                       "of one trajectory may fetch; a call over it is refused with the reason.")
    max_fps: float = Field(8.0, gt=0, allow_inf_nan=False, description="Highest frame rate get_frames samples at.")
    zoom_max_pixels: int = Field(200704, ge=3136, description="Pixel budget of one zoom crop after resizing "
                                 "(the crop is taken at the source resolution first).")
    window_max_pixels: int | None = Field(None, ge=3136, description="Pixel budget per get_frames frame "
                                          "(null: the data's video max_pixels).")
    call_cost: float = Field(0.0, ge=0, allow_inf_nan=False, description="Subtracted from the overall reward "
                             "per tool call (an error call costs the same).")
    max_tokens_per_turn: int | None = Field(None, ge=1, description="Generation limit of one policy turn (null: "
                                            "what is left of data.max_response_length).")
    timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False, description="Time limit of one tool call (the "
                             "frame-cache service's tool endpoint in distributed mode).")


class WeightSyncConfig(Section):
    """How the trainer's weights reach the rollout engine (weight_sync/)."""

    bucket_mib: int = Field(1024, ge=1, description="Size of the reusable bucket the actor's weights are cast "
                            "into, layer by layer, for each push to the engine (a decoder layer larger than "
                            "it goes alone); one RPC per full bucket.")


class RolloutConfig(Section):
    engine: Literal["vllm", "hf"] = Field("vllm", description="Generation backend.")
    n: int = Field(8, ge=1, description="Responses per question (group size).")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    top_k: int = Field(-1, description="Top-k sampling (-1: off).")
    val_temperature: float = Field(0.0, ge=0, description="Validation temperature (0: greedy).")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="vLLM GPU memory share.")
    tensor_parallel_size: int = Field(1, ge=1, description="vLLM tensor parallelism.")
    enforce_eager: bool = Field(True, description="Disable CUDA graphs in vLLM.")
    seed: int = Field(0, description="Sampling seed.")
    kv_cache_gib: float = Field(1.0, gt=0, description="vLLM KV-cache size per engine on CPU, in GiB: given "
                                "explicitly, never a share of the host's RAM (on GPUs gpu_memory_utilization "
                                "applies).")
    max_num_seqs: int = Field(64, ge=1, description="Most sequences one vLLM engine runs at once.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="vLLM's dtype. auto: float32 on CPU (bfloat16 for Qwen3.5), bfloat16 on GPUs (the "
        "checkpoints' and the GPU actor's compute dtype); weights are cast to it on the way in.")
    colocate: bool = Field(False, description="Embedded mode, rollout engine and actor on the same GPU: vLLM "
                           "sleeps (sleep_level) while the actor computes log-probs and updates, and wakes "
                           "for the weight push; needs vLLM sleep mode (CUDA; a no-op on CPU).")
    sleep_level: Literal[1, 2] = Field(1, description="With colocate: 1 offloads vLLM's weights to host memory "
                                       "and drops its KV cache; 2 drops both (the weights are woken first and "
                                       "reloaded from the actor, then the KV cache).")
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig)


class RewardConfig(Section):
    """How responses are scored: by the trainer, the rollout pool and the reward service alike."""

    url: str | None = Field(None, description="Reward service URL; null scores in-process.")
    accuracy_weight: float = Field(0.9, ge=0, allow_inf_nan=False,
                                   description="Weight of accuracy in the overall reward.")
    format_weight: float = Field(0.1, ge=0, allow_inf_nan=False, description="Weight of format in the overall reward.")
    default_problem_type: str | None = Field(None, description="Scorer for unknown problem types "
                                             "(null: an unknown type is an error).")
    answer_tag_policy: Literal["last", "first", "only"] = Field("last", description="Which <answer> tag counts.")
    scorer_options: dict[str, dict] = Field(default_factory=dict, description="Per-type scorer settings, keyed "
                                            "by problem type (e.g. numerical: {rel_tol: 0.01}).")
    extra_scorer_modules: list[str] = Field(default_factory=list, description="Modules imported before scoring "
                                            "(in every scoring process) that register more scorers.")
    timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False, description="Hard time limit per scored item: the "
                             "process scoring an item that overruns is killed and the item scores 0 with an "
                             "error (in-process and in the reward service alike).")
    workers: int | None = Field(None, ge=1, description="Scoring worker processes (in-process client and reward "
                                "service); null: the CPUs this process may use.")

    @model_validator(mode="after")
    def _canonical_types(self) -> RewardConfig:
        # Problem-type spellings resolve to one scorer name here, once, for every consumer.
        from easyvideor1.rewards.registry import (
            UnknownProblemType,
            canonical_problem_type,
            load_scorer_modules,
        )

        try:
            load_scorer_modules(self.extra_scorer_modules)
        except ImportError as exc:
            raise ValueError(f"extra_scorer_modules: cannot import {exc.name or exc}: {exc}") from None
        try:
            if self.default_problem_type is not None:
                canonical = canonical_problem_type(self.default_problem_type)
                if canonical != self.default_problem_type:
                    self.__dict__["default_problem_type"] = canonical
            options = {canonical_problem_type(k): dict(v) for k, v in self.scorer_options.items()}
        except UnknownProblemType as exc:
            raise ValueError(str(exc)) from None
        if options != self.scorer_options:
            self.__dict__["scorer_options"] = options
        return self

    def scoring_fields(self) -> dict:
        """The fields that decide a score (what a task or a request carries), JSON-ready."""
        return self.model_dump(mode="json", include=SCORING_FIELDS)


SCORING_FIELDS = frozenset({"accuracy_weight", "format_weight", "default_problem_type", "answer_tag_policy",
                            "scorer_options", "extra_scorer_modules", "timeout_s"})


class WorkerConfig(Section):
    actor: ActorConfig = Field(default_factory=ActorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)


class TrainerConfig(Section):
    total_steps: int = Field(100, ge=1, description="RL steps to run.")
    val_every: int = Field(10, ge=0, description="Validate every k steps (0: never).")
    val_before_train: bool = Field(True, description="Validate once before the first step.")
    # A killed run redoes at most save_every steps or save_every_s seconds of work, whichever is less.
    save_every: int = Field(20, ge=0, description="Checkpoint every k steps (0: not by steps); the run's end "
                            "always saves.")
    save_every_s: float = Field(1800.0, ge=0, description="Also checkpoint after a step once this many seconds "
                                "have passed since the last checkpoint or the start (0: not by time).")
    keep_checkpoints: int = Field(2, ge=1, description="Newest checkpoints kept in output_dir/checkpoints; "
                                  "older ones are deleted after each save.")
    output_dir: str = Field("runs/default", description="Run folder: checkpoints, metrics, plots.")
    resume: Literal["auto", "never"] = Field("auto", description="auto: continue from the newest checkpoint "
                                             "in output_dir, dropping the metrics.jsonl rows of later steps; "
                                             "never, or no checkpoint: a new run, which first moves an earlier "
                                             "run's metrics.jsonl, checkpoints/, tensorboard/ and curves.png to "
                                             "output_dir/earlier-N/.")
    loggers: list[Literal["console", "jsonl", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["console", "jsonl", "tensorboard"], description="Metric sinks.")
    experiment_name: str = Field("easyvideor1", description="Name shown in loggers.")
    seed: int = Field(42, description="Global seed (model init of heads, dropout, sampling order).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the trainer runs.")


class DistributedConfig(Section):
    mode: Literal["embedded", "distributed"] = Field("embedded", description="embedded: one process tree; "
                                                     "distributed: services over Redis/S3/Ray.")
    queue_url: str | None = Field(None, description="Work queue URL (redis://... or memory://name).")
    namespace: str = Field("default", description="Run namespace in every queue key.")
    weights_store: str | None = Field(None, description="Where policy versions are published "
                                      "(directory or s3://bucket/prefix).")
    staleness: int = Field(0, ge=0, description="Accept rollouts this many versions old (0: on-policy).")
    frame_cache_url: str | None = Field(None, description="Frame-cache service URL (http://...).")
    ray_address: str | None = Field(None, description="Ray cluster address (auto when null).")
    result_timeout_s: float = Field(1800.0, gt=0, description="Longest wait for one round's rollout results; "
                                    "then a clear error names the missing tasks.")
    queue_patience_s: float = Field(120.0, gt=0, description="How long a round waits out an unreachable queue "
                                    "(Redis restart); once it answers, lost tasks are re-put (queue.recover).")
    max_requeues: int = Field(3, ge=0, description="Times a task whose result was too stale is put again "
                              "before its sample is filtered.")
    train_ranks: int = Field(1, ge=1, description="FSDP ranks of the Ray trainer entrypoint, each a Ray actor "
                             "in one placement group.")
    cpus_per_rank: float = Field(1.0, gt=0, description="CPUs reserved per trainer rank actor.")
    gpus_per_rank: float | None = Field(None, ge=0, description="GPUs per trainer rank actor (null: 1 when "
                                        "CUDA is available, else 0).")
    cluster_file: str | None = Field(None, description="cluster.json of `evr1 up`; fills the URLs above that "
                                     "are unset (null: $EVR1_CLUSTER_FILE, else .evr1/cluster.json if present).")


class KubernetesConfig(Section):
    image: str = Field("ghcr.io/easyvideor1/trainer:0.1.0", description="Trainer image of the RayJob.")
    namespace: str = Field("default", description="Namespace of the rendered objects.")
    num_workers: int = Field(1, ge=0, description="Ray worker pods.")
    gpus_per_worker: int = Field(8, ge=0, description="GPUs per worker pod.")
    cpus_per_worker: int = Field(32, ge=1, description="CPUs per worker pod.")
    memory_per_worker: str = Field("512Gi", description="Memory per worker pod.")
    head_cpus: int = Field(8, ge=1, description="CPUs of the Ray head pod.")
    head_memory: str = Field("32Gi", description="Memory of the Ray head pod.")
    ttl_seconds_after_finished: int = Field(3600, ge=0, description="RayJob TTL after it finishes.")
    service_account: str | None = Field(None, description="Service account of the pods.")


LogLevel = Literal["debug", "info", "warning", "error"]


class RewardServiceConfig(Section):
    """``evr1 serve reward``; how it scores (weights, scorers, time limit, workers) is worker.reward."""

    host: str = Field("127.0.0.1", description="Bind address (0.0.0.0 in a container).")
    port: int = Field(8000, ge=0, le=65535, description="HTTP port.")
    max_batch: int = Field(4096, ge=1, description="Items per request (more: 413).")
    max_body_bytes: int = Field(32 << 20, ge=1, description="Request body size (more: 413).")
    max_header_bytes: int = Field(64 << 10, ge=1024, description="Request line plus headers, bytes (more: 431, "
                                  "refused before the rest is read).")
    max_json_depth: int = Field(64, ge=8, le=512, description="Nesting depth of the request body's JSON "
                                "(deeper: 422).")
    max_item_chars: int = Field(262_144, ge=1, description="Longest response/ground_truth/problem per item "
                                "(more: a per-item error).")
    token_env: str | None = Field(None, description="Require 'Authorization: Bearer $VAR' with this variable "
                                  "(null: $EVR1_REWARD_TOKEN when it is set, else open).")
    log_level: LogLevel = Field("info", description="Server log level.")


class FrameCacheServiceConfig(Section):
    """``evr1 serve frame-cache``; its backing store is data.frame_cache.store."""

    host: str = Field("127.0.0.1", description="Bind address (0.0.0.0 in a container).")
    port: int = Field(8001, ge=0, le=65535, description="HTTP port.")
    queue_url: str = Field("memory://frame-cache", description="Build queue: redis://host:port/db (shared by "
                           "replicas) or memory://NAME (this process).")
    namespace: str = Field("frame-cache", description="Build-queue namespace (one per deployment).")
    build_workers: int = Field(1, ge=0, description="Threads running builds in this process (0: serve and "
                               "enqueue only).")
    build_processes: int = Field(2, ge=1, description="Decoding processes per running build.")
    file_timeout_s: float = Field(600.0, gt=0, description="Seconds per media file before its decoding process "
                                  "is killed.")
    build_lease_s: float = Field(3600.0, gt=0, description="A build unfinished after this long is handed to "
                                 "another worker.")
    build_attempts: int = Field(3, ge=1, description="Deliveries of a build before it is reported failed.")
    worker_only: bool = Field(False, description="Run build workers only (no HTTP server); needs a redis:// queue.")
    read_only: bool = Field(False, description="Refuse PUT and DELETE of blobs.")
    max_blob_bytes: int = Field(1 << 30, ge=1, description="Largest PUT body.")
    max_request_bytes: int = Field(8 << 20, ge=1, description="Largest POST /v1/builds body.")
    max_header_bytes: int = Field(64 << 10, ge=1024, description="Request line plus headers, bytes (more: 431, "
                                  "refused before the rest is read).")
    data_roots: list[str] = Field(default_factory=list, description="Folders builds may read: a data file, its "
                                  "media and listed media must resolve (symlinks and '..' followed) under one of "
                                  "them, else 400 ([]: builds by path are refused).")

    _data_roots = field_validator("data_roots", mode="before")(_path_list)
    max_concurrent_reads: int = Field(16, ge=1, description="Blob reads served at once (a non-local store holds "
                                      "a blob in memory while it is sent).")
    token_env: str | None = Field(None, description="Require 'Authorization: Bearer $VAR' with this variable "
                                  "(null: $EVR1_FRAME_CACHE_TOKEN when it is set, else open).")
    write_token_env: str | None = Field(None, description="Write (builder) credential: PUT of blobs needs "
                                        "'Authorization: Bearer $VAR' (null: $EVR1_FRAME_CACHE_WRITE_TOKEN when "
                                        "set; with a read token but no write token, PUT is refused; with no "
                                        "token at all, PUT is open). Must differ from the read token.")
    admin_token_env: str | None = Field(None, description="Admin credential for DELETE and PUT ?replace=true of "
                                        "a stored blob, each logged (null: $EVR1_FRAME_CACHE_ADMIN_TOKEN when "
                                        "set, else no admin operations). Must differ from the other tokens.")
    source_roots: list[str] = Field(default_factory=list, description="Directories (absolute) whose media the "
                                    "service may decode to verify an uploaded blob against its source "
                                    "(docs/frame-cache-service.md); empty: those of data_roots (none: no source verification).")
    verify_frames: int = Field(4, ge=1, description="Frames of a video blob compared pixel-exact with the "
                               "decoded source (first, last and evenly between).")
    require_source_verification: bool = Field(False, description="Refuse an upload that cannot be verified "
                                              "against its source, even from the write credential.")
    max_concurrent_uploads: int = Field(4, ge=1, description="PUT bodies received at once; more are answered 503 "
                                        "with Retry-After (memory: at most this many blobs in flight).")
    shutdown_grace_s: float = Field(10.0, gt=0, description="Seconds running builds get after SIGTERM.")
    log_level: LogLevel = Field("info", description="Server log level.")


class RolloutPoolConfig(Section):
    """``evr1 serve rollout`` (Ray Serve) and ``python -m easyvideor1.rollout.worker``: the engines are
    worker.rollout, the model worker.actor.model_path, the queue and stores distributed.*."""

    replicas: int | None = Field(None, ge=1, description="Fixed replica count (null: autoscale between "
                                 "min_replicas and max_replicas on the queue backlog).")
    min_replicas: int = Field(1, ge=1, description="Autoscaling lower bound.")
    max_replicas: int = Field(1, ge=1, description="Autoscaling upper bound.")
    tasks_per_replica: int = Field(16, ge=1, description="Autoscaling target backlog per replica.")
    batch_size: int = Field(8, ge=1, description="Tasks leased per engine call.")
    visibility_timeout_s: float = Field(300.0, gt=0, description="Longest a worker holds one leased task, "
                                        "heartbeats included: a task still unfinished this long after its "
                                        "delivery goes to another worker (a live but stuck worker; a dead one "
                                        "loses its tasks after lease_s). Raise it for generations that take "
                                        "longer.")
    lease_s: float = Field(10.0, gt=0, description="Seconds a leased task stays with its worker without a "
                           "heartbeat: a live worker renews the leases of the tasks in hand every lease_s/3, so "
                           "a dead worker's tasks go to another worker about lease_s after it died, however "
                           "long generation takes. At most visibility_timeout_s (a larger value is taken as it: "
                           "no renewals).")
    max_attempts: int = Field(3, ge=1, description="Deliveries before a task is dead-lettered.")
    weights_timeout_s: float = Field(300.0, gt=0, description="Longest wait for a wanted policy version.")
    reward_patience_s: float = Field(120.0, gt=0, description="How long scoring is retried while the reward "
                                     "service is unavailable.")
    num_cpus: float = Field(1.0, gt=0, description="CPUs per replica.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica.")
    http_host: str = Field("127.0.0.1", description="Ray Serve HTTP proxy address.")
    http_port: int = Field(8000, ge=0, le=65535, description="Ray Serve HTTP proxy port.")
    app_name: str = Field("rollout", description="Serve application name.")
    route_prefix: str = Field("/", description="Serve route prefix.")
    ready_timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for every replica to be ready.")

    @model_validator(mode="after")
    def _bounds(self) -> RolloutPoolConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"serve.rollout.min_replicas ({self.min_replicas}) must be <= max_replicas "
                             f"({self.max_replicas})")
        return self


class ServeConfig(Section):
    reward: RewardServiceConfig = Field(default_factory=RewardServiceConfig)
    frame_cache: FrameCacheServiceConfig = Field(default_factory=FrameCacheServiceConfig)
    rollout: RolloutPoolConfig = Field(default_factory=RolloutPoolConfig)


class RunConfig(Section):
    data: DataConfig = Field(default_factory=DataConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @model_validator(mode="after")
    def _pool_fits_its_engines(self) -> RunConfig:
        gpus, tp = self.serve.rollout.num_gpus, self.worker.rollout.tensor_parallel_size
        if 0 < gpus < tp:
            raise ValueError(f"serve.rollout.num_gpus ({gpus:g}) is less than worker.rollout.tensor_parallel_size "
                             f"({tp}): each replica's engine spans that many GPUs")
        return self
