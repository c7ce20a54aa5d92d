"""An adapter that implements no official rule (a user's own) still evaluates: strict only."""

from easyvideor1.eval.benchmarks.base import Benchmark
from easyvideor1.eval.benchmarks.common import ScoringContext
from easyvideor1.eval.pipeline import scored_record
from easyvideor1.eval.types import EvalItem


class _OwnAdapter(Benchmark):
    name = "own_adapter"


def test_an_adapter_without_an_official_rule_reports_strict_only():
    bench, ctx = _OwnAdapter(), ScoringContext()
    item = EvalItem(benchmark=bench.name, id="1", question="Yes?", answer="yes", problem_type="boolean")
    record = scored_record(bench, item, "yes", ctx)
    assert record["status"] == "ok" and record["values"]["accuracy"] == 1.0
    summary = bench.aggregate([record], ctx)
    assert summary["official"]["status"] == "not reproduced" and "own_adapter" in summary["official"]["message"]
    assert summary["strict"]["value"] == 1.0 and summary["differences"]["count"] == 0
