"""A trained policy plays through the battle generator's stream (``remote`` players of generate_battles.js): the
choices it sends are the ones the records hold, its battles parse, and a checkpoint is pinned by its bytes."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import needs_simulator

from models.pokemon_policy import PokemonPolicy, PolicyConfig
from pipelines.pokemon.dex import gen_of_format, load_dex
from pipelines.pokemon.generated import GeneratedConfig, GeneratedSource, chunks, generate
from pipelines.pokemon.observation import vocabulary
from pipelines.pokemon.pov import Decision, pov_trajectory
from pipelines.pokemon.tracker import BattleTracker
from pipelines.stages import SourceInputs
from shards_schema.pokemon import NUM_MOVES, NUM_SWITCHES
from training.checkpoints import CheckpointError, live_identity, payload
from training.pokemon.offline_rl import TrainConfig
from training.pokemon.player import action_choice, pinned_checkpoint, stream_player
from training.registry import POKEMON_OBSERVATION

pytestmark = needs_simulator


def tiny_policy_checkpoint(path, seed: int = 0, kind: str = "pokemon_policy") -> str:
    """An untrained tiny policy saved as the trainer saves one (training/checkpoints.py), RNG states aside."""
    torch.manual_seed(seed)
    model_config = PolicyConfig.preset("tiny", len(vocabulary()))
    state = payload(kind=kind, model_config=model_config,
                    train_config=TrainConfig.tiny(shards="-", out="-"), step=0,
                    data=live_identity(POKEMON_OBSERVATION), model=PokemonPolicy(model_config), optimizer=None)
    torch.save({**state, "rng": []}, path)
    return str(path)


class Recording:
    """A StreamPlayer that remembers each choice it sent, by (battle, side, request number on that side)."""

    def __init__(self, player):
        self.player, self.sent, self.counts = player, {}, {}

    def answer(self, ask, fmt):
        key = (ask["battle"], ask["side"])
        n = self.counts[key] = self.counts.get(key, -1) + 1
        choice = self.sent[key + (n,)] = self.player.answer(ask, fmt)
        return choice

    def forget(self, battle_id):
        self.player.forget(battle_id)


@pytest.mark.parametrize("fmt", ["gen9randombattle", "gen1ou"])
def test_a_checkpoint_plays_through_the_generator_and_its_choices_are_recorded(tmp_path, fmt):
    state = tiny_policy_checkpoint(tmp_path / "state.pt")
    chunk = chunks([fmt], 2, 3, state, "heuristic", 2)[0]
    pin = pinned_checkpoint(state)
    player = Recording(stream_player(*pin))
    lines = [line for _, line in generate(chunk, players={"p1": player})]
    assert len(lines) == 2
    dex = load_dex(gen_of_format(fmt))
    decided = 0
    for line in lines:
        record = json.loads(line)
        assert record["error"] is None and record["players"]["p1"]["policy"] == "remote"
        requests = [e for e in record["streams"]["p1"] if e["kind"] == "request" and not e["request"].get("wait")]
        for n, event in enumerate(requests):
            sent = player.sent[(record["battle_id"], "p1", n)]
            if sent is not None:  # the policy's choice is the one the simulator executed
                assert event["choice"] == sent
                decided += 1
        assert requests
        rows = pov_trajectory(record, "p1", dex)  # its battles parse like any generated battle
        assert rows and all(r["action"] == -1 or r["legal_mask"][r["action"]] for r in rows)
    assert decided > 0 and player.player.live.fallbacks == 0
    if fmt == "gen9randombattle":  # once: nothing in it depends on the format
        again = [line for _, line in generate(chunk, players={"p1": stream_player(*pin)})]
        assert again == lines  # a battle is a function of its seed and the weights


def test_a_teacher_labels_a_checkpoints_decisions_without_changing_its_battle(tmp_path):
    """DAgger's data: a checkpoint plays p1 through the stream, the search player beside it labels each of its
    decisions; the battle is the one the checkpoint plays without a teacher, and its rows carry both."""
    state = tiny_policy_checkpoint(tmp_path / "state.pt")
    pin = pinned_checkpoint(state)
    plain = chunks(["gen1ou"], 1, 3, state, "heuristic", 1)[0]
    taught = chunks(["gen1ou"], 1, 3, state, "heuristic", 1, p1_teacher="search")[0]
    [(_, without)] = generate(plain, players={"p1": stream_player(*pin)})
    [(_, with_teacher)] = generate(taught, players={"p1": stream_player(*pin)})
    record = json.loads(with_teacher)
    assert record["error"] is None and record["players"]["p1"] == {**json.loads(without)["players"]["p1"],
                                                                    "teacher": "search"}
    requests = [e for e in record["streams"]["p1"] if e["kind"] == "request"]
    labels = [(e.pop("teacher_choice"), bool(e["request"].get("wait"))) for e in requests]
    del record["players"]["p1"]["teacher"]
    assert record == json.loads(without)
    assert all(isinstance(label, str) != wait for label, wait in labels)  # a wait request asks for no choice
    rows = [r for r in pov_trajectory(json.loads(with_teacher), "p1", load_dex(1)) if not r["done"]]
    assert all(r["legal_mask"][r["teacher_action"]] for r in rows if r["teacher_action"] >= 0)
    assert sum(r["teacher_action"] >= 0 for r in rows) > len(rows) / 2


def test_action_choice_inverts_the_recorded_action():
    """Every recorded move or switch of generated battles (heuristic vs random, gens 1, 4, 9) maps back through
    ``action_choice`` to the choice the simulator executed: what a live policy's action sends is what the same
    action meant in its training rows."""
    checked = 0
    for fmt in ("gen1ou", "gen4randombattle", "gen9randombattle"):
        dex = load_dex(gen_of_format(fmt))
        for _, line in generate(chunks([fmt], 2, 11, "heuristic", "random", 2)[0]):
            record = json.loads(line)
            for side in ("p1", "p2"):
                tracker = BattleTracker(dex, fmt)
                for event in record["streams"][side]:
                    if event["kind"] == "update":
                        for text in event["lines"]:
                            tracker.apply(text)
                        continue
                    if event["kind"] != "request" or event["choice"] is None:
                        continue
                    request = event["request"]
                    if request.get("wait") or request.get("teamPreview"):
                        continue
                    decision = Decision(tracker, side, request, event["choice"])
                    decision.render_state_and_mask()
                    action = decision.action()
                    if not 0 <= action < NUM_MOVES + NUM_SWITCHES:
                        continue  # tera variants and -1 are not actions a 9-way policy sends
                    words = event["choice"].split()
                    assert action_choice(decision, action) == " ".join(words[:2]), (fmt, event["choice"])
                    checked += 1
    assert checked > 200


def test_the_source_pins_a_checkpoint_by_its_bytes(tmp_path):
    """The job names the weights that played (sha256 in its config), reads them on the workers from the pinned
    path, and refuses a checkpoint changed after it was pinned rather than play other weights."""
    state = tiny_policy_checkpoint(tmp_path / "state.pt")
    source = GeneratedSource(SourceInputs(formats=("gen9randombattle",)),
                             GeneratedConfig(num_battles=1, battles_per_chunk=1, p1="random", p2=str(tmp_path)))
    plan = source.plan()
    config = source.output_config()
    assert config["p2_checkpoint"]["state"] == state and len(config["p2_checkpoint"]["sha256"]) == 64
    assert "p1_checkpoint" not in config
    [row] = source.read(plan.items[0])
    assert json.loads(row["payload"])["players"]["p2"]["policy"] == "remote"
    tiny_policy_checkpoint(tmp_path / "state.pt", seed=1)  # other weights under the same path
    with pytest.raises(CheckpointError, match="changed since the job pinned it"):
        source.read(plan.items[0])


def test_a_checkpoint_of_another_family_is_refused_when_pinned(tmp_path):
    tiny_policy_checkpoint(tmp_path / "state.pt", kind="pokemon_selfplay")
    source = GeneratedSource(SourceInputs(formats=("gen9randombattle",)),
                             GeneratedConfig(num_battles=1, p1=str(tmp_path), p2="random"))
    with pytest.raises(CheckpointError, match="pokemon_selfplay"):
        source.plan()
