"""Benchmarks: workloads, methods, metrics (``dlite-hf bench``).

Python API: :func:`dlite_hf.bench.run_bench` (``from dlite_hf.bench import run_bench, build_workloads``).
A results file reads typed with :func:`dlite_hf.bench.load_result` (a :class:`~dlite_hf.bench.results.BenchResult`).
"""

from __future__ import annotations

_LAZY = {
    "BenchMethod": "dlite_hf.bench.methods",
    "BenchResult": "dlite_hf.bench.results",
    "build_workloads": "dlite_hf.data.workloads",
    "load_result": "dlite_hf.bench.results",
    "markdown_table": "dlite_hf.bench.report",
    "run_bench": "dlite_hf.bench.runner",
    "write_outputs": "dlite_hf.bench.report",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dlite_hf.bench' has no attribute {name!r}")
