"""BenchFlow site: a BenchFlow-compatible agent-benchmark runner with a Django dashboard."""

__version__ = "0.1.0"
