"""The battle generator's scripted players (``pipelines/showdown/players.js``: random, heuristic, search) as
poke-env players, so they play on a Showdown server against poke-env's bots and trained policies (the ladder).

Each ``ScriptedPlayer`` runs one Node process (``pipelines/showdown/policy_server.js``) and hands it, per request,
the protocol lines of that battle it received since its last request and the ``|request|`` JSON: what the same
player sees inside the generator. The choice comes back as the simulator's own string (``move 2``, ``switch 3``,
``move 1 terastallize``) and goes to the server as is. The Node process answers in well under the time a battle
waits for its two sides; the event loop waits on it, as on any other player's ``choose_move``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import weakref

from poke_env.player import Player, SingleBattleOrder

from pipelines.pokemon.dex import REPO_ROOT, node_env
from pipelines.pokemon.generated import POLICIES
from training.pokemon.player import protocol_lines

POLICY_SERVER = REPO_ROOT / "pipelines" / "showdown" / "policy_server.js"


def _stop(proc: subprocess.Popen, errors) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    errors.close()


class ScriptedPlayer(Player):
    """A poke-env player whose choices come from one of the generator's scripted players (``policy``), seeded per
    battle from ``seed`` and the battle's tag."""

    def __init__(self, policy: str, *args, seed: int = 0, **kwargs):
        if policy not in POLICIES:
            raise ValueError(f"unknown scripted policy {policy!r}; the generator has {list(POLICIES)}")
        super().__init__(*args, **kwargs)
        self.policy = policy
        self.errors = tempfile.TemporaryFile()  # the process's complaints (an illegal choice, a crash), for close()
        self.proc = subprocess.Popen(["node", str(POLICY_SERVER), "--policy", policy, "--seed", str(seed)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                     env=node_env())
        self._finalizer = weakref.finalize(self, _stop, self.proc, self.errors)
        self.seen: dict[str, list[str]] = {}

    async def _handle_battle_message(self, split_messages):
        tag, lines = protocol_lines(split_messages)
        self.seen.setdefault(tag, []).extend(lines)
        await super()._handle_battle_message(split_messages)

    def _ask(self, battle) -> str | None:
        ask = {"battle": battle.battle_tag, "format": battle.format or self._format,
               "lines": self.seen.pop(battle.battle_tag, []), "request": battle.last_request}
        self.proc.stdin.write(json.dumps(ask).encode() + b"\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the {self.policy} player's Node process ended: {self.complaints()[-2000:]}")
        return json.loads(answer)["choice"]

    def choose_move(self, battle):
        choice = self._ask(battle)
        return SingleBattleOrder(f"/choose {choice}") if choice else self.choose_default_move()

    def teampreview(self, battle):
        choice = self._ask(battle)
        return f"/{choice}" if choice else self.random_teampreview(battle)

    def _battle_finished_callback(self, battle):
        self.seen.pop(battle.battle_tag, None)
        self.proc.stdin.write(json.dumps({"battle": battle.battle_tag, "forget": True}).encode() + b"\n")
        self.proc.stdin.flush()
        super()._battle_finished_callback(battle)

    def complaints(self) -> str:
        """What the Node process wrote to stderr so far (illegal or crashed choices)."""
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")

    def close(self) -> None:
        """Stop the Node process."""
        self._finalizer()
