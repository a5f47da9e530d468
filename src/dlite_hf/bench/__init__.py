"""Benchmarks: workloads, methods, metrics (``dlite-hf bench``).

Python API: ``from dlite_hf.bench import run_bench, build_workloads``; a results file reads typed with
:func:`load_result` (a :class:`~dlite_hf.bench.results.BenchResult`).
"""

from ..data.workloads import build_workloads
from .methods import BenchMethod
from .report import markdown_table, write_outputs
from .results import BenchResult, load_result
from .runner import run_bench

__all__ = [
    "BenchMethod",
    "BenchResult",
    "build_workloads",
    "load_result",
    "markdown_table",
    "run_bench",
    "write_outputs",
]
