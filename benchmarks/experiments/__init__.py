"""The POET paper experiments (issue #4): see benchmarks/RESULTS.md."""
