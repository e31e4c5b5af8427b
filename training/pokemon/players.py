"""Every kind of live player the evaluation and the ladder enter, built from how it is named: a checkpoint
(an offline-RL or a self-play policy).
"""

from __future__ import annotations

import functools

from training.checkpoints import CheckpointError, live_identity, read_checkpoint
from training.pokemon.player import PolicyPlayer, checked_policy
from training.pokemon.selfplay_player import SelfPlayPlayer, encoder_from_state, start_from_state
from training.registry import POKEMON_OBSERVATION


def load_player(path: str):
    """A function (account, **poke-env player options) → a player of the policy in a checkpoint (its folder or
    ``state.pt``, a path or a URI): an offline-RL policy (``pokemon_policy``) or a self-play policy
    (``pokemon_selfplay``, on the encoder its checkpoint holds: the one it was trained on, frozen or trained with it
    by ``--encoder-lr``; a fine-tune's logits added to those of the starting policy the checkpoint keeps, as in
    training), both choosing their most likely legal action; a player made with ``sample_seed=N`` draws its action
    from the policy's distribution instead (seeded; at ``temperature``, 1 by default), as self-play's runners do.
    Refused when the checkpoint reads another observation spec or vocabulary than this code makes."""
    ckpt = read_checkpoint(path)
    if ckpt.kind == "pokemon_policy":
        return functools.partial(PolicyPlayer, *checked_policy(ckpt))
    if ckpt.kind == "pokemon_selfplay":
        ckpt.check_features(live_identity(POKEMON_OBSERVATION))
        encoder, context = encoder_from_state(ckpt.extra["encoder"])
        start = start_from_state(ckpt.extra.get("start"), encoder)
        return functools.partial(SelfPlayPlayer, encoder, context, ckpt.build_model(), start=start, record=False)
    raise CheckpointError(f"{path} holds a {ckpt.kind} model; evaluate.py plays pokemon_policy and "
                          "pokemon_selfplay checkpoints")
