"""Side-by-side scan benchmarks: `python -m bench` (see docs/performance.md)."""
