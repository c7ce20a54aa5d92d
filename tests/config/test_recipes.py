"""The recipes of examples/configs/ and the GPU memory estimate they state (config/memory.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "k8s"))  # the KubeRay CRD validator of the k8s tests

from k8s_support import kuberay_errors, load_yaml_docs  # noqa: E402

from easyvideor1.cli.config import stated_memory  # noqa: E402
from easyvideor1.cli.main import main  # noqa: E402
from easyvideor1.config import load_config  # noqa: E402
from easyvideor1.config.memory import (  # noqa: E402
    GIB,
    KNOWN_MODELS,
    RECIPE_MARKER,
    count_parameters,
    estimate_memory,
    known_model,
    largest_micro_batch,
    model_shape,
    report_lines,
)
from easyvideor1.errors import ConfigError  # noqa: E402

RECIPES = sorted((REPO / "examples" / "configs").glob("*.yaml"))
# What a one-machine recipe needs to run as a RayJob against the chart's services (docs/recipes.md).
CHART_SERVICES = ["distributed.queue_url=redis://easyvideor1-redis:6379/0",
                  "distributed.weights_store=s3://easyvideor1/weights",
                  "distributed.frame_cache_url=http://easyvideor1-frame-cache:8001"]


def test_the_recipes_are_there():
    names = {p.name for p in RECIPES}
    assert {"qwen2.5-vl-3b-1gpu.yaml", "qwen2.5-vl-7b-8gpu.yaml", "qwen3-vl-8b-8gpu.yaml",
            "qwen2.5-vl-7b-k8s-multinode.yaml"} <= names


@pytest.mark.parametrize("name", sorted(KNOWN_MODELS))
def test_known_shapes_count_what_transformers_builds(name):
    model_type, text, vision, params, vision_params = KNOWN_MODELS[name]
    assert count_parameters(model_type, text, vision) == (params, vision_params)


def test_local_config_json_wins_and_counts_the_real_weights(tiny_model_factory):
    from safetensors import safe_open

    model_dir = tiny_model_factory("qwen2_5_vl")
    shape = model_shape(str(model_dir))
    assert shape.source == f"config.json at {model_dir / 'config.json'}"
    stored = 0
    for file in model_dir.glob("*.safetensors"):
        with safe_open(str(file), "pt") as handle:
            stored += sum(_numel(handle.get_slice(key).get_shape()) for key in handle.keys())
    assert shape.params == stored
    config = json.loads((model_dir / "config.json").read_text())
    assert (shape.hidden, shape.layers) == (config["text_config"]["hidden_size"],
                                            config["text_config"]["num_hidden_layers"])


def _numel(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def test_hub_ids_and_folders_match_the_table(tmp_path):
    assert known_model("Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen2.5-VL-7B-Instruct"
    assert known_model(str(tmp_path / "qwen3-vl-8b-instruct")) == "Qwen3-VL-8B-Instruct"
    assert known_model("Qwen/Qwen2.5-VL-7B") == "Qwen2.5-VL-7B-Instruct"  # base and instruct: one shape
    with pytest.raises(ConfigError, match="not a known model"):
        model_shape(str(tmp_path / "my-model"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="broken/config.json"):
        model_shape(str(tmp_path / "broken"))


def _cfg(*overrides: str):
    return load_config(None, ["worker.actor.model_path=Qwen/Qwen2.5-VL-7B-Instruct", *overrides])


def test_state_is_16_bytes_per_parameter_sharded_by_fsdp():
    params = KNOWN_MODELS["Qwen2.5-VL-7B-Instruct"][3]
    state = ("fp32 master weights", "fp32 gradients", "AdamW moments (fp32 m, v)")
    one = estimate_memory(_cfg())
    assert sum(one.parts[k] for k in state) == 16 * params
    four = estimate_memory(_cfg("distributed.mode=distributed", "distributed.train_ranks=4"))
    assert sum(four.parts[k] for k in state) == 16 * params / 4
    assert four.shard == 4 and "bf16 gathered FSDP units" in four.parts
    offload = estimate_memory(_cfg("distributed.mode=distributed", "distributed.train_ranks=4",
                                   "worker.actor.fsdp.cpu_offload=true"))
    assert sum(offload.parts[k] for k in state) == 0
    # Without FSDP the flag does nothing, and the estimate says so rather than counting on it.
    unsharded = estimate_memory(_cfg("worker.actor.fsdp.cpu_offload=true"))
    assert sum(unsharded.parts[k] for k in state) == 16 * params
    assert any("cpu_offload has no effect" in n for n in unsharded.notes)
    kl = estimate_memory(_cfg("distributed.mode=distributed", "distributed.train_ranks=4", "algorithm.kl.enable=true"))
    assert kl.parts["reference model (fp32)"] == 4 * params / 4


def test_activations_follow_frames_and_checkpointing():
    base = ["data.max_prompt_length=65536", "worker.actor.micro_batch_token_budget=1024"]  # one sequence each
    act = {f: estimate_memory(_cfg(*base, f"data.video_max_frames={f}")).parts["activations, largest micro-batch"]
           for f in (32, 64, 128)}
    assert act[32] < act[64] < act[128]
    full = estimate_memory(_cfg(*base)).parts["activations, largest micro-batch"]
    none = estimate_memory(_cfg(*base, "worker.actor.gradient_checkpointing=false"))
    assert none.parts["activations, largest micro-batch"] > 3 * full
    fp32 = estimate_memory(_cfg(*base, "worker.actor.fsdp.mixed_precision=fp32"))
    assert fp32.parts["activations, largest micro-batch"] == 2 * full and "bf16 compute weights" not in fp32.parts
    cut = estimate_memory(_cfg("data.max_prompt_length=4096"))
    assert cut.sequence.filtered and cut.sequence.prompt_tokens == 4096


def test_shared_prefix_counts_a_group_as_laid_out():
    """A group's prompt (and its video's patches) once, then its responses; a budget below one group
    cuts it into chunks of responses, each with the prompt; the logits are the responses' only."""
    base = ["data.max_prompt_length=65536", "data.video_max_frames=32", "data.max_response_length=512",
            "worker.rollout.n=8"]
    cfg = _cfg(*base)
    shape, seq = model_shape(cfg.worker.actor.model_path), estimate_memory(cfg).sequence
    group = seq.prompt_tokens + 8 * seq.response_tokens
    whole = largest_micro_batch(_cfg(*base, f"worker.actor.micro_batch_token_budget={group}"), shape, seq, 1)
    assert (whole.prompts, whole.sequences) == (1, 8)
    assert (whole.size.tokens, whole.size.patches, whole.size.response_tokens) == (group, seq.patches,
                                                                                   8 * seq.response_tokens)
    assert whole.gathered_keys == seq.prompt_tokens + 8 * seq.tokens
    budget = seq.prompt_tokens + 5 * seq.response_tokens // 2
    chunk = largest_micro_batch(_cfg(*base, f"worker.actor.micro_batch_token_budget={budget}"), shape, seq, 1)
    assert (chunk.prompts, chunk.sequences, chunk.size.tokens) == (1, 2, seq.prompt_tokens + 2 * seq.response_tokens)
    two = largest_micro_batch(_cfg(*base, f"worker.actor.micro_batch_token_budget={2 * group}"), shape, seq, 1)
    assert (two.prompts, two.sequences, two.size.patches) == (2, 16, 2 * seq.patches)
    # Off, or with the attention that cannot take the layout: one sequence per response, nothing gathered.
    for switch in ("worker.actor.shared_prefix=false", "worker.actor.attention=sdpa"):
        off = largest_micro_batch(_cfg(*base, f"worker.actor.micro_batch_token_budget={8 * seq.tokens}", switch),
                                  shape, seq, 1)
        assert (off.sequences, off.size.tokens, off.gathered_keys) == (8, 8 * seq.tokens, 0)
        assert "shared-prefix gathered K/V" not in estimate_memory(_cfg(*base, switch)).parts
    # The same eight responses cost less laid out once; the gathered K/V grow with kept layers.
    on = estimate_memory(_cfg(*base, f"worker.actor.micro_batch_token_budget={group}"))
    off = estimate_memory(_cfg(*base, f"worker.actor.micro_batch_token_budget={8 * seq.tokens}",
                               "worker.actor.shared_prefix=false"))
    assert on.sequences_per_micro_batch == off.sequences_per_micro_batch == 8
    assert on.parts["activations, largest micro-batch"] < off.parts["activations, largest micro-batch"]
    kept = estimate_memory(_cfg(*base, f"worker.actor.micro_batch_token_budget={group}",
                                "worker.actor.gradient_checkpointing=false"))
    per_layer = on.parts["shared-prefix gathered K/V"] / 2
    assert kept.parts["shared-prefix gathered K/V"] == pytest.approx(per_layer * (shape.layers + 1))


def test_vllm_share_sets_the_gpu_a_colocated_run_needs():
    colocated = estimate_memory(_cfg("worker.rollout.colocate=true", "worker.rollout.gpu_memory_utilization=0.4"))
    assert colocated.role == "colocated"
    assert colocated.gpu_bytes >= colocated.persistent / 0.6 and colocated.gpu_bytes >= colocated.trainer_bytes
    shared = estimate_memory(_cfg("worker.rollout.gpu_memory_utilization=0.4"))
    assert shared.gpu_bytes == pytest.approx(max(shared.trainer_bytes / 0.6, shared.rollout_need / 0.4))
    # The engine's share must hold the bf16 weights of its tensor-parallel shard.
    tiny_share = estimate_memory(_cfg("distributed.mode=distributed", "worker.rollout.gpu_memory_utilization=0.05"))
    assert tiny_share.gpu_bytes == pytest.approx(tiny_share.rollout_need / 0.05)
    assert tiny_share.rollout_need > 2 * KNOWN_MODELS["Qwen2.5-VL-7B-Instruct"][3]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_states_the_estimate_and_renders_a_valid_rayjob(recipe, capsys):
    cfg = load_config(recipe, [])
    lines = recipe.read_text().splitlines()
    # The comment block is what `evr1 config check` prints, line for line.
    start = lines.index(RECIPE_MARKER)
    block = ["# " + line for line in report_lines(cfg)]
    assert lines[start + 1:start + 1 + len(block)] == block, f"re-run `evr1 config check {recipe}` and paste it"
    stated = stated_memory(recipe)
    estimate = estimate_memory(cfg)
    assert stated is not None and stated[1] == estimate.gpu_gib
    target = next(int(line.split(":")[1]) for line in lines if line.startswith("# target-gpu-gib:"))
    assert estimate.gpu_bytes <= target * GIB, f"{recipe.name} needs {estimate.gpu_gib} GiB, states a {target} GiB GPU"
    assert not estimate.sequence.filtered, "the recipe's longest video must fit data.max_prompt_length"

    assert main(["config", "check", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert f"gpu-memory-gib: {estimate.gpu_gib}" in out and "activations, largest micro-batch" in out

    services = [] if cfg.distributed.queue_url else CHART_SERVICES
    assert main(["k8s", "render-job", str(recipe), *services]) == 0
    config_map, job = load_yaml_docs(capsys.readouterr().out)
    assert kuberay_errors(job) == []
    assert yaml.safe_load(config_map["data"]["run.yaml"])["worker"]["actor"]["model_path"] == \
        cfg.worker.actor.model_path
    cluster = job["spec"]["rayClusterSpec"]
    gpus = sum(int(group["rayStartParams"].get("num-gpus", 0)) * int(group.get("replicas", 1))
               for group in cluster.get("workerGroupSpecs", []))
    gpus += int(cluster["headGroupSpec"]["rayStartParams"].get("num-gpus", 0))
    assert gpus >= cfg.distributed.train_ranks * (cfg.distributed.gpus_per_rank or 1)


def test_docs_table_states_each_recipes_estimate():
    """docs/recipes.md's 'needs per GPU' column is each recipe's stated figure."""
    rows = {line.split("|")[1].strip().strip("`"): line.split("|")[-2].strip()
            for line in (REPO / "docs" / "recipes.md").read_text().splitlines() if line.startswith("| `")}
    assert {recipe.name: rows.get(recipe.name) for recipe in RECIPES} == \
        {recipe.name: f"{stated_memory(recipe)[1]} GiB" for recipe in RECIPES}


def test_check_refuses_a_wrong_statement(tmp_path, capsys):
    recipe = RECIPES[0]
    text = recipe.read_text()
    stated = stated_memory(recipe)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(text.replace(f"# gpu-memory-gib: {stated[1]}", f"# gpu-memory-gib: {stated[1] - 10}"))
    assert main(["config", "check", str(wrong)]) == 1
    assert f"{wrong}:{stated[0]}: states gpu-memory-gib {stated[1] - 10}" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(f"# gpu-memory-gib: {stated[1]}", "# gpu-memory-gib: lots"))
    assert main(["config", "check", str(bad)]) == 1
    assert f"{bad}:{stated[0]}: gpu-memory-gib must be a whole number of GiB, got 'lots'" in capsys.readouterr().err
