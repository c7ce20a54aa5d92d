"""Bad input is named before any work (issue #29, items 2, 3 and 7), run as a user types it.

Every command runs in a plain shell (``env -i PATH=<venv>/bin:/usr/bin:/bin HOME=...``, none of
the Makefile's variables) in one workspace holding synthetic data and a tiny model, both made
by README's own command lines. A bad model folder, a typo in a row's ``problem_type``, a bad
config key and a prepared manifest whose keys are gone must each give one line naming the
path (or file:line and field), a non-zero exit and no traceback; a hang trips the timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from demo_env import plain_env

pytestmark = pytest.mark.slow

TIMEOUT_S = 900  # generous: a hang (hub retries, an engine start), not a slow machine, trips it
TYPO = "numerics"  # the typo of row 2, whose problem_type is "numerical"

RUN_YAML = """\
data:
  train_files: data/synth/train.jsonl
  max_prompt_length: 1024
  max_response_length: 16
  rollout_batch_size: 2
  video_max_frames: 4
  video_min_frames: 2
  video_min_pixels: 3136
  video_max_pixels: 3136
  image_min_pixels: 784
  image_max_pixels: 3136
worker:
  actor: {model_path: models/tiny, mini_batch_size: 2, gradient_checkpointing: false}
trainer: {total_steps: 1, val_every: 0, val_before_train: false, output_dir: runs/first, resume: never}
"""


def run(ws: Path, command: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``command`` as typed in a plain shell in the workspace, stdout and stderr together."""
    return subprocess.run(["bash", "-c", command], cwd=ws, env=plain_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


def lines_naming(out: str, needle: str) -> list[str]:
    return [line for line in out.splitlines() if needle in line]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("first-contact")
    for command in ("evr1 data synth --out data/synth --n-per-type 2 --seed 0",
                    "evr1 model tiny --family qwen2_5_vl --out models/tiny"):
        done = run(root, command)
        assert done.returncode == 0, done.stdout
    rows = (root / "data/synth/train.jsonl").read_text().splitlines()
    row = json.loads(rows[1])
    assert row["problem_type"] == "numerical", row
    row["problem_type"] = TYPO
    rows[1] = json.dumps(row)
    (root / "data/synth/typo.jsonl").write_text("\n".join(rows) + "\n")
    (root / "run.yaml").write_text(RUN_YAML)
    (root / "models/empty").mkdir()
    no_weights = root / "models/no-weights"
    shutil.copytree(root / "models/tiny", no_weights)
    for weights in no_weights.glob("*.safetensors"):
        weights.unlink()
    return root


# ---- item 2: a model folder that is not one ---------------------------------------------------

# Every command that loads a model, as docs write it; MODEL is the folder under test.
MODEL_COMMANDS = {
    "train": "evr1 train run.yaml worker.actor.model_path=MODEL",
    "data prepare": "evr1 data prepare data/synth/train.jsonl --store ./prep-store --model MODEL --out prep.jsonl",
    "filter-by-pass-rate": "evr1 data filter-by-pass-rate data/synth/train.jsonl --model MODEL -k 2",
    "eval": "evr1 eval --model MODEL --benchmarks jsonl=data/synth/val.jsonl --out eval-bad-model",
    "up": "evr1 up --dir .evr1-bad-model --model MODEL",
    "serve rollout": "evr1 serve rollout --config run.yaml --model-path MODEL",
    "rollout worker": "python -m easyvideor1.rollout.worker --config run.yaml --model-path MODEL "
                      "--queue-url redis://127.0.0.1:1",
}
BAD_MODELS = {
    "models/missing": "no such folder",
    "models/empty": "not a model folder: no config.json",
}


@pytest.mark.parametrize("model", sorted(BAD_MODELS))
@pytest.mark.parametrize("command", sorted(MODEL_COMMANDS))
def test_a_bad_model_folder_is_one_line_naming_it(ws, command, model):
    done = run(ws, MODEL_COMMANDS[command].replace("MODEL", model))
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stdout, done.stdout
    named = lines_naming(done.stdout, model)
    assert len(named) == 1, done.stdout
    assert named[0].endswith(f"{model}: {BAD_MODELS[model]}"), named
    assert "huggingface" not in done.stdout.lower(), done.stdout  # the hub was never asked


def test_a_model_folder_without_weights_is_named(ws):
    done = run(ws, MODEL_COMMANDS["train"].replace("MODEL", "models/no-weights"))
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    assert lines_naming(done.stdout, "models/no-weights") == [
        "evr1: error: worker.actor.model_path models/no-weights: no weights (*.safetensors or pytorch_model*.bin)"]


def test_model_dir_problem_names_each_missing_part(ws, tmp_path):
    from easyvideor1.models.paths import model_dir_problem

    assert model_dir_problem(ws / "models/tiny") is None
    partial = tmp_path / "model"
    shutil.copytree(ws / "models/tiny", partial)
    for name in ("processor_config.json", "preprocessor_config.json"):
        (partial / name).unlink(missing_ok=True)
    assert model_dir_problem(partial).startswith("no image/video processor")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (partial / name).unlink()
    assert model_dir_problem(partial).startswith("no tokenizer")
    (partial / "config.json").write_text("{")
    assert model_dir_problem(partial).startswith("config.json does not parse")
    assert "hf download Qwen/Qwen2.5-VL-3B-Instruct" in model_dir_problem("Qwen/Qwen2.5-VL-3B-Instruct")
    assert model_dir_problem(partial / "config.json") == "not a folder (give the model's folder)"


# ---- item 3: a problem_type no scorer knows ---------------------------------------------------

TYPO_LINE = "data/synth/typo.jsonl:2: field 'problem_type': unknown problem_type 'numerics'"


def test_train_refuses_an_unknown_problem_type_before_any_work(ws):
    done = run(ws, "evr1 train run.yaml data.train_files=data/synth/typo.jsonl")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    named = lines_naming(done.stdout, "typo.jsonl")
    assert len(named) == 1 and TYPO_LINE in named[0], done.stdout
    assert "worker.reward.default_problem_type" in named[0]  # the field that exists, not rewards.*
    assert not (ws / "runs/first/metrics.jsonl").exists()


def test_filter_by_pass_rate_refuses_an_unknown_problem_type_before_the_engine(ws):
    done = run(ws, "evr1 data filter-by-pass-rate data/synth/typo.jsonl --model models/tiny -k 2")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    named = lines_naming(done.stdout, "typo.jsonl")
    assert len(named) == 1 and TYPO_LINE in named[0], done.stdout
    assert not (ws / "data/synth/typo.filtered.jsonl").exists()
    assert not (ws / "data/synth/typo.filtered.log").exists()  # stopped before its log, its engine


def test_a_run_routing_unknown_types_to_a_default_takes_the_row(ws, monkeypatch):
    from easyvideor1.config import load_config
    from easyvideor1.errors import DataError
    from easyvideor1.train.preflight import load_run_data

    monkeypatch.chdir(ws)
    with pytest.raises(DataError, match="typo.jsonl:2: field 'problem_type'"):
        load_run_data(load_config("run.yaml", ["data.train_files=data/synth/typo.jsonl"]))
    data = load_run_data(load_config("run.yaml", ["data.train_files=data/synth/typo.jsonl",
                                                  "worker.reward.default_problem_type=numerical"]))
    assert TYPO in {s.problem_type for s in data.train}


def test_cache_build_leaves_the_row_out_and_names_it(ws):
    done = run(ws, "evr1 cache build data/synth/typo.jsonl --store ./typo-cache --workers 2 --no-progress")
    assert done.returncode == 3 and "Traceback" not in done.stdout, done.stdout  # 3: some rows left out
    named = lines_naming(done.stdout, "typo.jsonl")
    assert len(named) == 1 and TYPO_LINE in named[0], done.stdout
    assert "rows: 15 good, 1 bad" in done.stdout


def test_data_prepare_leaves_the_row_out_and_names_it(ws):
    done = run(ws, "evr1 data prepare data/synth/typo.jsonl --store ./typo-prep --model models/tiny "
                   "--out typo-prepared.jsonl --no-progress")
    assert done.returncode == 3 and "Traceback" not in done.stdout, done.stdout
    assert any(TYPO_LINE in line for line in done.stdout.splitlines()), done.stdout
    kept = [json.loads(line) for line in (ws / "typo-prepared.jsonl").read_text().splitlines()]
    assert len(kept) == 15 and TYPO not in {row["problem_type"] for row in kept}


def test_eval_names_the_file_line_and_field_of_an_unknown_problem_type(ws):
    done = run(ws, "evr1 eval --model models/tiny --benchmarks jsonl=data/synth/typo.jsonl --out eval-typo")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    assert any(TYPO_LINE in line for line in done.stdout.splitlines()), done.stdout
    assert not (ws / "eval-typo/results.jsonl").exists()  # refused before the engine


def test_eval_leaves_a_benchmark_with_an_unknown_problem_type_out(ws):
    done = run(ws, "evr1 eval --model models/tiny --benchmarks synthetic=data/synth,jsonl=data/synth/typo.jsonl "
                   "--limit 2 --max-tokens 4 --out eval-left-out")
    assert done.returncode == 3 and "Traceback" not in done.stdout, done.stdout
    not_run = lines_naming(done.stdout, "jsonl: not run")
    assert len(not_run) == 1 and TYPO_LINE in not_run[0], done.stdout
    assert lines_naming(done.stdout, "synthetic: "), done.stdout


# ---- item 7: config check lines, prepared manifests checked by key ----------------------------

def test_config_check_names_file_line_and_field(ws):
    (ws / "typo.yaml").write_text(RUN_YAML.replace("  rollout_batch_size: 2\n", "  rollout_batch_sise: 2\n"))
    done = run(ws, "evr1 config check typo.yaml")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    assert "typo.yaml:5: data.rollout_batch_sise: unknown key (did you mean 'rollout_batch_size'?)" in done.stdout
    done = run(ws, "evr1 config check run.yaml worker.rollout.n=x")
    assert done.returncode == 1, done.stdout
    assert "override worker.rollout.n=x: worker.rollout.n: Input should be a valid integer" in done.stdout
    (ws / "broken.yaml").write_text("data:\n  train_files: [a\nworker: {}\n")
    done = run(ws, "evr1 config check broken.yaml")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    assert lines_naming(done.stdout, "broken.yaml:3: invalid YAML"), done.stdout


def test_validate_checks_a_prepared_manifest_by_key_in_the_store(ws):
    shutil.copytree(ws / "data/synth", ws / "data/moved")
    done = run(ws, "evr1 data prepare data/moved/train.jsonl --store ./moved-store --model models/tiny "
                   "--out data/moved/prepared.jsonl --no-progress")
    assert done.returncode == 0, done.stdout
    shutil.rmtree(ws / "data/moved/media")  # a pod that reads by key has no raw media
    done = run(ws, "evr1 data validate data/moved/prepared.jsonl --store ./moved-store")
    assert done.returncode == 0, done.stdout
    done = run(ws, "evr1 data validate data/moved/prepared.jsonl")  # the store each row records
    assert done.returncode == 0, done.stdout
    (ws / "not-a-store").mkdir()
    done = run(ws, "evr1 data validate data/moved/prepared.jsonl --store ./not-a-store")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    assert len(lines_naming(done.stdout, "not-a-store")) == 1, done.stdout
    # Another store that lacks the first row's video: that key is named, file:line and field.
    shutil.copytree(ws / "moved-store", ws / "other-store")
    first = json.loads((ws / "data/moved/prepared.jsonl").read_text().splitlines()[0])
    key = first["prepared"]["families"]["qwen2_5_vl"]["videos"][0]["key"]
    blobs = [p for p in (ws / "other-store").rglob(f"{key}*") if p.is_file()]
    assert blobs, key
    for blob in blobs:
        blob.unlink()
    done = run(ws, "evr1 data validate data/moved/prepared.jsonl --store ./other-store")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout
    named = lines_naming(done.stdout, "prepared.jsonl:1: field 'prepared.families.qwen2_5_vl.videos[0].key': ")
    assert len(named) == 1 and f"{key} is not in the frame store" in named[0], done.stdout
    done = run(ws, "evr1 data validate data/moved/train.jsonl")  # raw rows still need their media
    assert done.returncode == 1 and "media file not found" in done.stdout, done.stdout
