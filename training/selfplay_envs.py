"""The self-play environments, registered once with explicit imports: each game's environment class by ``--env``
name, and the command's config joining each game's fields to the core's.

This is the one module of self-play that names the games (lerobot's ``policies/factory.py`` is the model):
``training/selfplay.py`` reads ``ENVIRONMENTS`` and ``SelfPlayConfig`` from here. A new game adds its environment
(``training/<game>/selfplay.py``: a ``SelfPlayCoreConfig`` subclass with its fields, and the environment class) and
one line to each below.
"""

from __future__ import annotations

from dataclasses import dataclass

from training.melee.selfplay import MeleeSelfPlay, MeleeSelfPlayConfig
from training.pokemon.selfplay import PokemonSelfPlay, PokemonSelfPlayConfig

ENVIRONMENTS = {"melee": MeleeSelfPlay, "pokemon": PokemonSelfPlay}
"""Each environment's side of a run: policy shape, league, runners, how their results make a rollout."""


@dataclass(frozen=True, kw_only=True)
class SelfPlayConfig(MeleeSelfPlayConfig, PokemonSelfPlayConfig):
    """Configuration of a self-play run: the core's fields (``training/selfplay_base.SelfPlayCoreConfig``) and each
    game's; the one ``--env`` names is read.

    Attributes:
        env: ``melee`` (the world model) or ``pokemon`` (real battles on local Showdown servers).
    """

    env: str = "melee"

    def __post_init__(self):
        if self.env not in ENVIRONMENTS:
            raise ValueError(f"--env must be one of {sorted(ENVIRONMENTS)}")
        super().__post_init__()
        problem = ENVIRONMENTS[self.env].config_problem(self)
        if problem:
            raise ValueError(problem)

    @classmethod
    def tiny(cls, *, out: str, **overrides) -> SelfPlayConfig:
        fields = {"battles_per_runner": 2, "preset": "test", "num_runners": 2, "envs_per_runner": 2,
                  "rollout_steps": 8, "seed_frames": 20,
                  "max_frames": 12, "opponent_window": 3, "d_lstm": 16, "snapshot_every": 2, "wandb_mode": "disabled",
                  **overrides}
        return cls(out=out, **fields)

    def environment(self):
        """The environment's side of the run (``ENVIRONMENTS``)."""
        return ENVIRONMENTS[self.env](self)
