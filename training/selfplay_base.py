"""What self-play's core and each game's self-play environment share, naming no game: the finished game a runner
reports (``Episode``) and where runner actors are placed (``ACTOR_SCHEDULING``).

A game's environment (``training/<game>/selfplay.py``) imports this module; the core (``training/selfplay.py``)
reaches the games through the registry (``training/selfplay_envs.py``), so no game module imports the core.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTOR_SCHEDULING = "DEFAULT"
"""Where the learner's runner and league actors go: on the cluster, never into the learner's own placement group.
Inside a Tune trial (``tune/ppo_sweep.py``) the learner inherits the trial's capture of child tasks, and a runner
asking 1 CPU was put into the learner's bundle of 0.5 and refused ("cannot fit into any bundles for the placement
group")."""


@dataclass
class Episode:
    """One finished game of the learner, for metrics and the league.

    Attributes:
        opponent: who it played (kind, name).
        side: the learner's side (0 = the first player).
        frames: steps the learner took (frames in Melee, decisions in Pokémon).
        terms: each reward term summed over the game (the environment's ``reward_terms``).
        reward: the summed reward.
        score: 1 a win, 0.5 a draw, 0 a loss (each environment says when a game is won).
        truncated: ended by the time limit.
    """

    opponent: object
    side: int
    frames: int
    terms: dict
    reward: float
    score: float
    truncated: bool
