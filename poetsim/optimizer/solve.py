"""Solving, under its public name: :func:`solve` and its result types, from
:mod:`poetsim.optimizer.search` (where the steps of the search live)."""

from poetsim.optimizer.search import STAGE_MAX_OPS, SolveResult, SolveStatus, solve

__all__ = ["STAGE_MAX_OPS", "SolveResult", "SolveStatus", "solve"]
