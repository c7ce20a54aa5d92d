"""Asynchronous multi-benchmark evaluation over the frame cache: adapters, pipeline, reports.

>>> from easyvideor1.eval import benchmark_names
>>> "videomme" in benchmark_names()
True
"""

from easyvideor1.eval.benchmarks.base import Benchmark, benchmark_names, get_benchmark, register
from easyvideor1.eval.benchmarks.common import ScoringContext
from easyvideor1.eval.report import compare_markdown, compare_rows, load_report
from easyvideor1.eval.runner import EvalConfig, parse_benchmarks, run_eval
from easyvideor1.eval.types import AnnotationError, EvalError, EvalItem, ItemScore

__all__ = [
    "AnnotationError", "Benchmark", "EvalConfig", "EvalError", "EvalItem", "ItemScore", "ScoringContext",
    "benchmark_names", "compare_markdown", "compare_rows", "get_benchmark", "load_report", "parse_benchmarks",
    "register", "run_eval",
]
