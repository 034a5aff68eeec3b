"""poetsim benchmarks: pytest-benchmark suites (bench_*.py) and the paper experiments."""
