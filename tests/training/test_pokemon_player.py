"""How a live player turns a policy's logits into an action: greedy by default, sampled (seeded) on request."""

from __future__ import annotations

import torch

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from pipelines.pokemon.observation import vocabulary
from training.pokemon.player import greedy_action, policy_action


def _window(seed: int):
    """A random window of 3 turns (tokens, numbers) with actions 1, 4 and 7 illegal on its last turn."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, 50, (1, 3, 87), generator=g)
    numeric = torch.randn(1, 3, 50, generator=g)
    legal = torch.ones(1, 3, 9, dtype=torch.bool)
    legal[0, -1, [1, 4, 7]] = False
    return tokens, numeric, legal


def test_sampled_actions_follow_the_policy_and_repeat_with_their_seed():
    torch.manual_seed(0)
    model = PokemonPolicy(PolicyConfig.preset("tiny", len(vocabulary()))).eval()
    tokens, numeric, legal = _window(1)
    with torch.no_grad():
        logits = model(tokens, numeric, legal, torch.ones(1, 3, dtype=torch.bool)).logits[0, -1]
    probs = torch.softmax(logits.float(), -1)

    assert greedy_action(model, tokens, numeric, legal) == int(logits.argmax())
    assert policy_action(model, tokens, numeric, legal, None) == int(logits.argmax())

    def draws(seed: int, n: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return [policy_action(model, tokens, numeric, legal, g) for _ in range(n)]

    first = draws(7, 300)
    assert first[:30] == draws(7, 30)  # the seed fixes the draws
    assert first[:30] != draws(8, 30)
    counts = torch.bincount(torch.tensor(first), minlength=9).float()
    assert counts[[1, 4, 7]].sum() == 0  # an illegal action is never drawn
    assert len(set(first)) >= 2  # a distribution, not the argmax every time
    # each legal action's share within 4 standard errors of its probability
    share = counts / counts.sum()
    se = (probs * (1 - probs) / counts.sum()).sqrt()
    assert bool(((share - probs).abs() <= 4 * se + 1e-3).all()), (share, probs)
