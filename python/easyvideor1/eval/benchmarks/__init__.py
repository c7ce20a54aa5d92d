"""Benchmark adapters, one module each, registered by name (see ``base.ADAPTER_MODULES``)."""

from easyvideor1.eval.benchmarks.base import Benchmark, benchmark_names, get_benchmark, register

__all__ = ["Benchmark", "benchmark_names", "get_benchmark", "register"]
