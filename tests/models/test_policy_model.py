"""Policy model and loss math: padding never changes real steps, masking never picks illegal actions, losses
equal hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from models.pokemon_policy import PokemonPolicy, PolicyConfig, check_inputs, fold_action_ids, fold_actions
from shards_schema.pokemon import (
    MOVE_SLOT_NUMBERS,
    MOVE_SLOT_WORDS,
    OBS_NUMERIC,
    SWITCH_SLOT_NUMBERS,
    SWITCH_SLOT_WORDS,
)
from training import losses

VOCAB = 100


def _batch(b=2, t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (b, t, 87), generator=g)
    numeric = torch.rand(b, t, OBS_NUMERIC, generator=g)
    legal = torch.rand(b, t, 9, generator=g) > 0.4
    legal[..., 0] = True
    return tokens, numeric, legal


@pytest.fixture
def model():
    torch.manual_seed(0)
    return PokemonPolicy(PolicyConfig.preset("tiny", VOCAB)).eval()


def test_padding_never_changes_real_steps(model):
    tokens, numeric, legal = _batch()
    valid = torch.ones(2, 6, dtype=torch.bool)
    out = model(tokens, numeric, legal, valid)
    # right padding with garbage turns: the real prefix is unchanged
    pad_tokens = torch.cat([tokens, torch.randint(0, VOCAB, (2, 4, 87))], dim=1)
    pad_numeric = torch.cat([numeric, torch.rand(2, 4, OBS_NUMERIC) * 100], dim=1)
    pad_legal = torch.cat([legal, torch.ones(2, 4, 9, dtype=torch.bool)], dim=1)
    pad_valid = torch.cat([valid, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    padded = model(pad_tokens, pad_numeric, pad_legal, pad_valid)
    torch.testing.assert_close(padded.logits[:, :6], out.logits)
    torch.testing.assert_close(padded.q_values[:, :6], out.q_values)
    # and the loss over real steps is the same
    actions = torch.zeros(2, 6, dtype=torch.long)
    pad_actions = torch.cat([actions, torch.full((2, 4), 3)], dim=1)
    loss = losses.behaviour_cloning_loss(out.logits, actions, valid)
    pad_loss = losses.behaviour_cloning_loss(padded.logits, pad_actions, pad_valid)
    torch.testing.assert_close(loss, pad_loss)


def test_causal_attention_equals_the_masked_reference_on_valid_turns(model):
    """The fast path (``is_causal``, no mask: the flash kernel on GPU) against the reference that masks padded keys
    explicitly, on right-padded windows of different lengths: equal on every valid turn, so the losses are too."""
    tokens, numeric, legal = _batch(b=4, t=10, seed=5)
    lengths = torch.tensor([10, 7, 3, 1])
    valid = torch.arange(10)[None, :] < lengths[:, None]  # right padding, as the window loader builds it
    fast = model(tokens, numeric, legal, valid)
    reference = model(tokens, numeric, legal, valid, mask_padding=True)
    torch.testing.assert_close(fast.logits[valid], reference.logits[valid])
    torch.testing.assert_close(fast.q_values[valid], reference.q_values[valid])
    torch.testing.assert_close(fast.values[valid], reference.values[valid])
    actions = torch.where(valid, torch.zeros(4, 10, dtype=torch.long), -1)
    torch.testing.assert_close(losses.behaviour_cloning_loss(fast.logits, actions, valid),
                               losses.behaviour_cloning_loss(reference.logits, actions, valid))


def test_the_masked_reference_hides_left_padding(model):
    """Left padding is not what the loader builds; the masked reference keeps padded turns from reaching real ones
    there too (what padded turns contain never changes the real turns' outputs)."""
    tokens, numeric, legal = _batch(b=1, t=4)
    valid = torch.ones(1, 4, dtype=torch.bool)
    pad_valid = torch.cat([torch.zeros(1, 3, dtype=torch.bool), valid], 1)
    pad_legal = torch.cat([torch.ones(1, 3, 9, dtype=torch.bool), legal], 1)
    a = model(torch.cat([torch.zeros(1, 3, 87, dtype=torch.long), tokens], 1),
              torch.cat([torch.zeros(1, 3, OBS_NUMERIC), numeric], 1), pad_legal, pad_valid, mask_padding=True)
    b = model(torch.cat([torch.randint(0, VOCAB, (1, 3, 87)), tokens], 1),
              torch.cat([torch.rand(1, 3, OBS_NUMERIC) * 50, numeric], 1), pad_legal, pad_valid, mask_padding=True)
    torch.testing.assert_close(a.logits[:, 3:], b.logits[:, 3:])


def test_actor_never_picks_illegal(model):
    tokens, numeric, legal = _batch(b=4, t=8, seed=3)
    out = model(tokens, numeric, legal, torch.ones(4, 8, dtype=torch.bool))
    probs = torch.softmax(out.logits, -1)
    assert torch.all(probs[~legal] == 0)
    sampled = torch.distributions.Categorical(logits=out.logits).sample((200,))
    assert torch.all(legal.gather(-1, sampled.permute(1, 2, 0)))


def test_token_ids_out_of_range_are_refused_where_data_is_loaded():
    import numpy as np

    tokens, _, _ = _batch()
    check_inputs(tokens, VOCAB)
    check_inputs(tokens.numpy().astype(np.int32), VOCAB)
    check_inputs(np.zeros((0, 87), np.int32), VOCAB)  # an empty batch
    tokens[0, 0, 0] = VOCAB
    with pytest.raises(ValueError, match=f"token id {VOCAB} is outside the vocabulary of {VOCAB} words"):
        check_inputs(tokens, VOCAB)
    with pytest.raises(ValueError, match="token id -2"):
        check_inputs(np.full((2, 87), -2), VOCAB)


def test_fold_tera_into_moves():
    mask13 = torch.zeros(13, dtype=torch.bool)
    mask13[[1, 5, 11]] = True  # move 1, switch 1, tera move 2
    assert fold_actions(mask13).tolist() == [False, True, True, False, False, True, False, False, False]
    assert fold_action_ids(torch.tensor([-1, 0, 4, 8, 9, 12])).tolist() == [-1, 0, 4, 8, 0, 3]


def test_presets_sizes():
    sizes = {name: PokemonPolicy(PolicyConfig.preset(name, 4000)).num_parameters()
             for name in ("tiny", "small", "medium")}
    assert sizes["tiny"] < 1e6 and 10e6 < sizes["small"] < 22e6 and 35e6 < sizes["medium"] < 70e6


def test_a_width_override_scales_the_feed_forward_and_keeps_the_head_width():
    small = PolicyConfig.preset("small", 50)  # 6 heads of 64, d_ff 4 × d_model
    assert PolicyConfig.preset("small", 50, d_model=384) == small
    wide = PolicyConfig.preset("small", 50, d_model=256)
    assert (wide.d_model, wide.n_heads, wide.d_ff, wide.n_layers) == (256, 4, 1024, small.n_layers)
    assert PolicyConfig.preset("small", 50, d_model=32).n_heads == 1  # narrower than one head: one head
    assert PolicyConfig.preset("tiny", 50, d_model=48).n_heads == 3  # tiny's heads are 16 wide
    assert PolicyConfig.preset("small", 50, d_model=160).n_heads == 2  # 160 // 64 = 2 heads of 80
    sizes = [PokemonPolicy(PolicyConfig.preset("tiny", 50, d_model=d)).num_parameters() for d in (16, 32, 64)]
    assert sizes == sorted(sizes) and len(set(sizes)) == 3


def test_losses_hand_computed():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # p = (0.25, 0.75)
    actions = torch.tensor([[1]])
    mask = torch.tensor([[True]])
    assert losses.behaviour_cloning_loss(logits, actions, mask).item() == pytest.approx(-math.log(0.75))
    # masked steps do not count
    logits2 = torch.cat([logits, torch.tensor([[[5.0, -5.0]]])], 1)
    actions2 = torch.tensor([[1, 1]])
    assert losses.behaviour_cloning_loss(logits2, actions2, torch.tensor([[True, False]])).item() == pytest.approx(
        -math.log(0.75))
    targets = losses.td_targets(torch.tensor([[1.0, 0.0]]), torch.tensor([[False, True]]),
                                torch.tensor([[[2.0, 4.0], [9.0, 9.0]]]), torch.tensor([0.5, 0.9]))
    torch.testing.assert_close(targets, torch.tensor([[[2.0, 4.6], [0.0, 0.0]]]))
    q = torch.tensor([[[[1.0, 3.0], [2.0, 0.0]]]])  # (B=1, T=1, G=2, A=2)
    assert losses.critic_loss(q, torch.tensor([[1]]), torch.tensor([[[2.0, 1.0]]]), mask).item() == pytest.approx(
        ((3 - 2) ** 2 + (0 - 1) ** 2) / 2)
    adv = losses.advantages(q, torch.tensor([[[2.0, 1.0]]]), torch.tensor([[1]]))
    torch.testing.assert_close(adv, torch.tensor([[[1.0, -1.0]]]))
    assert losses.filtered_bc_weights(adv).tolist() == [[[1.0, 0.0]]]
    assert losses.exp_advantage_weights(torch.tensor([1.0, 10.0]), beta=1.0, max_weight=5.0).tolist() == \
        pytest.approx([math.e, 5.0])
    w = torch.tensor([[2.0]])
    assert losses.weighted_actor_loss(logits, actions, w, mask).item() == pytest.approx(-2 * math.log(0.75))


def test_masked_steps_with_illegal_placeholder_actions_give_no_nan():
    logits = torch.tensor([[[0.0, float("-inf")], [1.0, 2.0]]])  # step 0 is masked and its action is illegal
    actions = torch.tensor([[1, 0]])
    mask = torch.tensor([[False, True]])
    loss = losses.behaviour_cloning_loss(logits, actions, mask)
    assert torch.isfinite(loss)
    assert torch.isfinite(losses.weighted_actor_loss(logits, actions, torch.ones(1, 2), mask))


def _slot_model() -> PokemonPolicy:
    torch.manual_seed(0)
    model = PokemonPolicy(PolicyConfig.preset("tiny", VOCAB, action_head="slots")).eval()
    with torch.no_grad():
        model.actor.weight.zero_()  # the linear read alone would tell the slots apart by number
        model.actor.bias.zero_()
        model.slots.action.normal_()
    return model


def _permuted(tokens, numeric, moves, switches):
    """The same turn with its move slots and switch slots put in another order (words and numbers alike)."""
    tokens, numeric = tokens.clone(), numeric.clone()
    for slot_words, slot_numbers, order in ((MOVE_SLOT_WORDS, MOVE_SLOT_NUMBERS, moves),
                                            (SWITCH_SLOT_WORDS, SWITCH_SLOT_NUMBERS, switches)):
        words, numbers = torch.tensor(slot_words), torch.tensor(slot_numbers)
        tokens[..., words.reshape(-1)] = tokens[..., words[order].reshape(-1)]
        numeric[..., numbers.reshape(-1)] = numeric[..., numbers[order].reshape(-1)]
    return tokens, numeric


def test_the_slot_head_scores_a_move_by_what_it_is_wherever_it_sits():
    """With the per-action embedding at zero, moving a move (or a switch target) to another slot moves its score with
    it; the per-action embedding is what may still tell slots apart."""
    model = _slot_model()
    with torch.no_grad():
        model.slots.action.zero_()
    tokens, numeric = torch.randint(3, VOCAB, (2, 6, 87)), torch.rand(2, 6, OBS_NUMERIC)
    moves, switches = torch.tensor([2, 0, 3, 1]), torch.tensor([4, 1, 0, 3, 2])
    legal, valid = torch.ones(2, 6, 9, dtype=torch.bool), torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        x = model.features(tokens, numeric, valid)
        before, before_q = model.slots(x, tokens, numeric, model.encoder.words)
        moved_tokens, moved_numeric = _permuted(tokens, numeric, moves, switches)
        after, after_q = model.slots(x, moved_tokens, moved_numeric, model.encoder.words)
    order = torch.cat([moves, switches + 4])
    assert torch.allclose(after, before[..., order], atol=1e-6)
    assert torch.allclose(after_q, before_q[..., order, :], atol=1e-6)
    out = model(tokens, numeric, legal, valid)
    assert out.logits.shape == (2, 6, 9) and out.q_values.shape == (2, 6, 4, 9)


def test_the_slot_head_adds_to_the_linear_one_and_keeps_the_mask():
    model = _slot_model()
    tokens, numeric = torch.randint(3, VOCAB, (1, 4, 87)), torch.rand(1, 4, OBS_NUMERIC)
    legal = torch.zeros(1, 4, 9, dtype=torch.bool)
    legal[..., [1, 5]] = True
    with torch.no_grad():
        out = model(tokens, numeric, legal, torch.ones(1, 4, dtype=torch.bool))
        slot_logits, _ = model.slots(model.features(tokens, numeric, None), tokens, numeric, model.encoder.words)
    assert torch.isinf(out.logits[~legal]).all()
    assert torch.allclose(out.logits[legal], slot_logits[legal], atol=1e-6)  # the linear actor is zeroed


def test_action_head_is_checked_and_defaults_to_linear():
    assert PolicyConfig(vocab_size=VOCAB).action_head == "linear"
    assert PokemonPolicy(PolicyConfig.preset("tiny", VOCAB)).slots is None
    with pytest.raises(ValueError, match="action_head"):
        PolicyConfig(vocab_size=VOCAB, action_head="pointer")


def _own_critic_model(context=0, action_head="slots", seed=0):
    torch.manual_seed(seed)
    return PokemonPolicy(PolicyConfig.preset("tiny", VOCAB, action_head=action_head, critic_trunk="own",
                                             critic_context=context)).eval()


@pytest.mark.parametrize("action_head", ["linear", "slots"])
def test_an_own_critic_trunk_and_the_actor_never_share_a_gradient(action_head):
    model = _own_critic_model(action_head=action_head)
    tokens, numeric, legal = _batch(b=2, t=5, seed=2)
    out = model(tokens, numeric, legal, torch.ones(2, 5, dtype=torch.bool))
    critic = dict(model.critic_trunk.named_parameters())
    actor = {name: p for name, p in model.named_parameters() if not name.startswith("critic_trunk.")}
    assert model.critic is None and critic and actor
    out.logits[legal].sum().backward(retain_graph=True)
    assert all(p.grad is None for p in critic.values())  # the actor's loss reaches no critic weight
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.values())
    model.zero_grad(set_to_none=True)
    out.q_values.sum().backward()
    assert all(p.grad is None for p in actor.values())  # Q alone reaches no actor weight
    assert all(p.grad is not None for name, p in critic.items())


def test_a_one_turn_critic_reads_each_turn_alone_and_the_actor_its_history():
    """critic_context 1: each turn's Q equals the critic run on that turn as a window of its own (the readable
    reference), whatever came before; the actor still reads the whole window."""
    model = _own_critic_model(context=1)
    tokens, numeric, legal = _batch(b=2, t=6, seed=4)
    valid = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        out = model(tokens, numeric, legal, valid)
        for k in range(6):  # turn k alone sits at position 0 of its own window
            position = model.critic_trunk.position
            shifted = PokemonPolicy(model.cfg).critic_trunk  # same weights, the position embedding moved to k
            shifted.load_state_dict(model.critic_trunk.state_dict())
            shifted.position.weight.data[0] = position.weight.data[k]
            alone = shifted(tokens[:, k:k + 1], numeric[:, k:k + 1], valid[:, k:k + 1])
            torch.testing.assert_close(out.q_values[:, k], alone[:, 0])
        changed = tokens.clone()
        changed[:, :3] = torch.randint(0, VOCAB, (2, 3, 87))
        after = model(changed, numeric, legal, valid)
    torch.testing.assert_close(after.q_values[:, 3:], out.q_values[:, 3:])  # earlier turns never reach Q
    assert not torch.allclose(after.logits[:, 3:][legal[:, 3:]], out.logits[:, 3:][legal[:, 3:]])


@pytest.mark.parametrize("context", [0, 2, 3])
def test_a_limited_critic_context_equals_the_masked_reference_on_valid_turns(context):
    model = _own_critic_model(context=context)
    tokens, numeric, legal = _batch(b=3, t=7, seed=6)
    valid = torch.arange(7)[None, :] < torch.tensor([7, 4, 1])[:, None]
    with torch.no_grad():
        fast = model(tokens, numeric, legal, valid)
        reference = model(tokens, numeric, legal, valid, mask_padding=True)
        torch.testing.assert_close(fast.q_values[valid], reference.q_values[valid])
        if context:  # a sliding window: each layer reaches context - 1 turns further back
            reach = model.cfg.n_layers * (context - 1) + 1
            changed = tokens.clone()
            changed[:, 0] = torch.randint(0, VOCAB, (3, 87))
            after = model(changed, numeric, legal, valid)
            torch.testing.assert_close(after.q_values[:, reach:], fast.q_values[:, reach:])
            assert not torch.allclose(after.q_values[0, reach - 1], fast.q_values[0, reach - 1])


def test_critic_trunk_and_context_are_checked():
    assert PolicyConfig(vocab_size=VOCAB).critic_trunk == "shared"
    with pytest.raises(ValueError, match="critic_trunk must be one of"):
        PolicyConfig(vocab_size=VOCAB, critic_trunk="separate")
    with pytest.raises(ValueError, match="set critic_trunk='own'"):
        PolicyConfig(vocab_size=VOCAB, critic_context=1)
    with pytest.raises(ValueError, match=">= 0"):
        PolicyConfig(vocab_size=VOCAB, critic_trunk="own", critic_context=-1)
