"""A real local Showdown server (127.0.0.1, our port, stopped by PID) plays real poke-env battles."""

from __future__ import annotations

import asyncio
import shutil
import socket

import pytest

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is needed for the server")


def test_local_server_plays_poke_env_battles(tmp_path):
    from poke_env import AccountConfiguration, ServerConfiguration
    from poke_env.player import MaxBasePowerPlayer, RandomPlayer

    from training.showdown_server import free_port, showdown_server

    port = free_port()
    with showdown_server(port, log_path=tmp_path / "server.log") as url:
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
