"""Benchmarks: workloads, methods, metrics."""
