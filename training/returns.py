"""Discounted returns of whole trajectories, computed once per decoded shard by the loader (the critic's Monte Carlo
targets, and the tail of its λ-returns past a window's end).

A trajectory's rows are a run of consecutive shard rows (an index row's ``row_start``, ``num_rows``). Row ``t``'s
return for discount γ is what follows its decision: ``G_t = r_{t+1} + γ G_{t+1}`` over the trajectory's rows, 0 at
its last row (nothing follows it; in ``pokemon_turns`` the closing ``done`` row, whose reward is the result). The
reward of row ``t`` itself is not part of ``G_t``: it came before the decision, as in the one-step target
``r_{t+1} + γ V(s_{t+1})`` (``training/losses.td_targets``). A trajectory cut before its end (no ``done`` row) gets
the return of the rewards it holds.

``discounted_returns`` is the fast path (one vectorised step per distance from the trajectories' ends);
``discounted_returns_reference`` the readable loop it is tested against.
"""

from __future__ import annotations

import numpy as np


def discounted_returns_reference(rewards: np.ndarray, gammas) -> np.ndarray:
    """Returns of one trajectory, row by row: (n,) rewards → (n, G) float64."""
    gammas = np.asarray(gammas, np.float64)
    out = np.zeros((len(rewards), len(gammas)))
    following = np.zeros(len(gammas))  # G of the next row
    for t in range(len(rewards) - 2, -1, -1):
        following = rewards[t + 1] + gammas * following
        out[t] = following
    return out


def discounted_returns(rewards: np.ndarray, row_start: np.ndarray, num_rows: np.ndarray, gammas) -> np.ndarray:
    """Returns of every row of a shard: (N,) rewards and its trajectories' (first row, rows) → (N, G) float32.
    Rows outside every trajectory get 0.

    All trajectories step back from their ends together: pass ``d`` sets the rows ``d`` rows before their
    trajectory's last row, from the row after them, so the cost is one vectorised step per row of the longest
    trajectory instead of a Python step per row."""
    gammas = np.asarray(gammas, np.float64)
    rewards = np.asarray(rewards, np.float64)
    row_start, num_rows = np.asarray(row_start, np.int64), np.asarray(num_rows, np.int64)
    out = np.zeros((len(rewards), len(gammas)))
    last = row_start + num_rows - 1  # (K,): each trajectory's last row
    for d in range(1, int(num_rows.max(initial=0))):
        rows = (last - d)[num_rows > d]  # the rows d before their trajectory's end
        out[rows] = rewards[rows + 1, None] + gammas * out[rows + 1]
    return out.astype(np.float32)
