"""A real local Showdown server (127.0.0.1, our port, stopped by PID) plays real poke-env battles."""

from __future__ import annotations

import asyncio
import socket

import psutil
import pytest
from conftest import is_loopback, listening_sockets, needs_simulator

pytestmark = needs_simulator


def test_local_server_plays_poke_env_battles(tmp_path):
    from poke_env import AccountConfiguration, ServerConfiguration
    from poke_env.player import MaxBasePowerPlayer, RandomPlayer

    from training.pokemon.showdown_server import free_port, showdown_server

    port = free_port()
    with showdown_server(port, log_path=tmp_path / "server.log") as url:
        _assert_listens_on_loopback_only(port)
        server = ServerConfiguration(url, "https://play.pokemonshowdown.com/action.php?")
        a = RandomPlayer(AccountConfiguration("rf random", None), server_configuration=server,
                         battle_format="gen9randombattle", max_concurrent_battles=2)
        b = MaxBasePowerPlayer(AccountConfiguration("rf maxbp", None), server_configuration=server,
                               battle_format="gen9randombattle", max_concurrent_battles=2)
        asyncio.run(asyncio.wait_for(a.battle_against(b, n_battles=2), timeout=120))
        assert a.n_finished_battles == 2 and b.n_finished_battles == 2
        assert a.n_won_battles + b.n_won_battles + a.n_tied_battles == 2
    with pytest.raises(OSError):  # stopped: nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=1)


def _assert_listens_on_loopback_only(port: int) -> None:
    """Every listening socket of the server on ``port`` and of the processes under it is bound to loopback (it runs
    with --no-security: anyone who reached it could log in as anyone)."""
    pids = {c.pid for c in psutil.net_connections(kind="inet")
            if c.laddr.port == port and c.status == psutil.CONN_LISTEN}
    assert pids, f"nothing listens on {port}"
    listening = [s for pid in pids for s in listening_sockets(pid)]
    assert port in {p for _, _, p in listening}, listening  # the list holds the server's own socket
    assert all(is_loopback(host) for _, host, _ in listening), listening


def test_exported_ou_teams_are_packed_and_validated():
    """The generator's team export: packed six-Pokémon teams for gen1ou, none for a random format."""
    from training.pokemon.evaluate import export_teams

    teams = export_teams("gen1ou", 3, seed=5)
    assert len(teams) == 3 and len(set(teams)) == 3
    assert all(len(team.split("]")) == 6 for team in teams)
    assert export_teams("gen1ou", 1, seed=5, first_index=2) == teams[2:]  # deterministic per (seed, index)
    assert export_teams("gen9randombattle", 3, seed=5) == []


def test_team_export_finds_the_simulator_installed_elsewhere(tmp_path, monkeypatch):
    """A checkout without node_modules (a worktree, a cluster node) finds the simulator through
    REPLAYFORGE_SHOWDOWN_DIR, as the generated source does."""
    import shutil

    import training.pokemon.evaluate as evaluate
    from pipelines.pokemon.dex import showdown_dir

    expected = evaluate.export_teams("gen1ou", 2, seed=5)
    installed = showdown_dir()
    shutil.copytree(evaluate.REPO_ROOT / "pipelines" / "showdown", tmp_path / "pipelines" / "showdown")
    monkeypatch.setattr(evaluate, "REPO_ROOT", tmp_path)  # scripts in a tree where node finds no node_modules
    monkeypatch.setenv("REPLAYFORGE_SHOWDOWN_DIR", str(installed))
    assert evaluate.export_teams("gen1ou", 2, seed=5) == expected


@pytest.mark.timeout(240)
def test_policy_plays_ou_battles_without_fallbacks(tmp_path):
    """A (untrained) tiny policy plays gen1ou on the local server with exported teams against RandomPlayer: the
    server accepts both teams and every decision comes from the policy (our tracker follows the live OU log)."""
    import torch

    from models.pokemon_policy import PokemonPolicy, PolicyConfig
    from pipelines.pokemon.observation import vocabulary
    from training.checkpoints import live_identity, payload
    from training.pokemon.evaluate import EvalConfig
    from training.pokemon.evaluate import run as evaluate
    from training.pokemon.offline_rl import TrainConfig
    from training.pokemon.showdown_server import free_port
    from training.registry import POKEMON_OBSERVATION

    torch.manual_seed(0)
    model_config = PolicyConfig.preset("tiny", len(vocabulary()))
    model = PokemonPolicy(model_config)
    checkpoint = tmp_path / "state.pt"  # as the trainer writes it (training/checkpoints.py), the RNG states aside
    torch.save({**payload(kind="pokemon_policy", model_config=model_config,
                          train_config=TrainConfig.tiny(shards="-", out="-"), step=0,
                          data=live_identity(POKEMON_OBSERVATION), model=model, optimizer=None), "rng": []},
               checkpoint)
    rows = evaluate(EvalConfig.tiny(checkpoint=str(checkpoint), port=free_port(), formats=["gen1ou"], battles=3,
                                    num_teams=2), log=lambda *_: None)
    assert [(r["format"], r["opponent"], r["battles"]) for r in rows] == [("gen1ou", "random", 3)]
    assert rows[0]["fallback_moves"] == 0
    # every decision's mask was audited against the server's request (counted, named: see test_request_mask.py)
    assert rows[0]["decisions"] >= 3 and sum(rows[0]["mask_mismatches"].values()) <= rows[0]["decisions"]
