"""The results file (resume safety) and the reports (JSON, markdown, PNG, comparison)."""

from __future__ import annotations

import json

import pytest
from eval_fixtures import perfect_response, wrong_response

from easyvideor1.cli.main import main
from easyvideor1.eval import EvalError, ScoringContext, get_benchmark
from easyvideor1.eval.pipeline import scored_record
from easyvideor1.eval.report import compare_rows, load_report, write_report
from easyvideor1.eval.results import ResultsLog, read_results, settings_differences

SETTINGS = {"model": "/m", "family": "qwen2_5_vl", "sampling": {"temperature": 0.0, "max_tokens": 8},
            "prompt_style": "direct", "judge": None, "engine_args": {"max_num_seqs": 8, "dtype": "float32"},
            "benchmarks": {"videomme": {"video": {"fps": 1.0, "max_frames": 4}, "image": {}}}}


def rec(i: int) -> dict:
    return {"benchmark": "videomme", "id": str(i), "status": "ok", "values": {"accuracy": 1.0}}


def test_append_and_resume_skip_done(tmp_path):
    with ResultsLog(tmp_path, SETTINGS, resume=False) as log:
        log.append(rec(1))
        log.append(rec(2))
        with pytest.raises(EvalError, match="written twice"):
            log.append(rec(2))
    with ResultsLog(tmp_path, SETTINGS, resume=True) as log:
        assert log.done == {"videomme/1", "videomme/2"}
        log.append(rec(3))
    assert [r["id"] for r in read_results(tmp_path / "results.jsonl")] == ["1", "2", "3"]


def test_refuses_to_overwrite_without_resume(tmp_path):
    with ResultsLog(tmp_path, SETTINGS, resume=False) as log:
        log.append(rec(1))
    with pytest.raises(EvalError, match="pass --resume"):
        ResultsLog(tmp_path, SETTINGS, resume=False)


def test_torn_last_line_is_cut_on_resume(tmp_path):
    with ResultsLog(tmp_path, SETTINGS, resume=False) as log:
        log.append(rec(1))
    path = tmp_path / "results.jsonl"
    with open(path, "a") as handle:
        handle.write('{"benchmark": "videomme", "id": "2", "sta')  # killed mid-write
    with ResultsLog(tmp_path, SETTINGS, resume=True) as log:
        assert log.done == {"videomme/1"}
        log.append(rec(2))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["1", "2"]


def test_corrupt_middle_line_stops_with_its_number(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec(1)) + "\nnot json\n" + json.dumps(rec(3)) + "\n")
    with pytest.raises(EvalError, match=r"results\.jsonl:2: corrupt result record"):
        read_results(path)


def test_resume_with_other_settings_is_refused(tmp_path):
    with ResultsLog(tmp_path, SETTINGS, resume=False):
        pass
    changed = json.loads(json.dumps(SETTINGS))
    changed["benchmarks"]["videomme"]["video"]["max_frames"] = 64
    changed["engine_args"]["max_num_seqs"] = 64  # concurrency alone is allowed to change
    with pytest.raises(EvalError, match=r"benchmarks\.videomme\.video\.max_frames: 4 -> 64"):
        ResultsLog(tmp_path, changed, resume=True)
    concurrency_only = json.loads(json.dumps(SETTINGS))
    concurrency_only["engine_args"]["max_num_seqs"] = 64
    assert settings_differences(SETTINGS, concurrency_only) == []


def test_resume_across_adapter_protocol_versions_is_refused(tmp_path):
    """A run recorded before an adapter changed (no version stored: version 1) is not
    resumed into by the changed adapter; an unchanged adapter's old run still is."""
    unversioned = json.loads(json.dumps(SETTINGS))
    current = json.loads(json.dumps(SETTINGS))
    current["benchmarks"]["videomme"]["protocol_version"] = 1  # no version stored means version 1
    assert settings_differences(unversioned, current) == []
    version = get_benchmark("mvbench").protocol_version
    assert version > 1
    unversioned["benchmarks"]["mvbench"] = {"video": {}, "image": {}}
    current["benchmarks"]["mvbench"] = {"video": {}, "image": {}, "protocol_version": version}
    assert settings_differences(unversioned, current) == [f"benchmarks.mvbench.protocol_version: 1 -> {version}"]
    with ResultsLog(tmp_path, unversioned, resume=False):
        pass
    with pytest.raises(EvalError, match=rf"mvbench\.protocol_version: 1 -> {version}"):
        ResultsLog(tmp_path, current, resume=True)


def test_one_run_per_output_folder(tmp_path):
    with ResultsLog(tmp_path, SETTINGS, resume=False):
        with pytest.raises(EvalError, match="in use by another evaluation run"):
            ResultsLog(tmp_path, SETTINGS, resume=True)


def _run_dir(tmp_path, name, bench_fixtures, right):
    root, _ = bench_fixtures
    ctx = ScoringContext()
    summaries, records = {}, []
    for bench_name in ("videomme", "charades_sta"):
        bench = get_benchmark(bench_name)
        items = bench.load(root / bench_name)
        rs = [scored_record(bench, i, perfect_response(i) if k < right else wrong_response(i), ctx)
              for k, i in enumerate(items)]
        summaries[bench_name] = bench.aggregate(rs, ctx)
        records += rs
    out = tmp_path / name
    out.mkdir()
    return out, write_report(out, SETTINGS, summaries, records, {"samples": len(records), "wall_s": 1.0})


def test_report_files_and_compare(tmp_path, bench_fixtures, capsys):
    run_a, paths = _run_dir(tmp_path, "before", bench_fixtures, right=1)
    run_b, _ = _run_dir(tmp_path, "after", bench_fixtures, right=2)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = paths["markdown"].read_text()
    assert "### accuracy metrics" in text and "### iou metrics" in text and "### by duration" in text
    report = load_report(run_a)
    assert (
        len(report["records"]) == 5
        and report["summaries"]["videomme"]["metrics"]["accuracy"]["value"] == 1 / 3
    )
    rows = compare_rows(load_report(run_a), load_report(run_b))
    overall = {(r["benchmark"], r["metric"]): r for r in rows if r["scope"] == "overall"}
    assert overall[("videomme", "accuracy")]["delta"] == pytest.approx(1 / 3)
    assert overall[("charades_sta", "R@0.5")]["delta"] == pytest.approx(0.5)
    # The release rows are one short video's three questions; the second is the synopsis one.
    synopsis = [r for r in rows if r["scope"] == "task_type" and r["category"] == "Information Synopsis"][0]
    assert synopsis["a"] == 0.0 and synopsis["b"] == 1.0
    assert main(["eval", "compare", str(run_a), str(run_b), "--output", str(tmp_path / "cmp.md")]) == 0
    printed = capsys.readouterr().out
    assert "| overall |  | accuracy | accuracy | 33.33 | 66.67 | +33.33 |" in printed
    assert (tmp_path / "cmp.md").read_text() == printed


def test_compare_lists_setting_differences(tmp_path, bench_fixtures):
    run_a, _ = _run_dir(tmp_path, "a", bench_fixtures, right=1)
    run_b, _ = _run_dir(tmp_path, "b", bench_fixtures, right=1)
    report = json.loads((run_b / "report.json").read_text())
    report["settings"]["benchmarks"]["videomme"]["video"]["max_frames"] = 32
    (run_b / "report.json").write_text(json.dumps(report))
    from easyvideor1.eval.report import compare_markdown

    assert "benchmarks.videomme.video.max_frames: 4 -> 32" in compare_markdown(run_a, run_b)
    with pytest.raises(EvalError, match="no evaluation report"):
        load_report(tmp_path / "missing")
