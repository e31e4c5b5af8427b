"""The `search` player of the battle generator: legal, deterministic, and blind to the foe's hidden information."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import needs_simulator

from pipelines.pokemon import generated
from pipelines.pokemon.dex import REPO_ROOT, node_env

pytestmark = needs_simulator
FAULTS = ("policy chose illegal", "policy crashed", "simulator: |error|", "every legal choice was rejected")


def run_generator(fmt: str, p1: str, p2: str, num_battles: int, seed: int, first_index: int = 0):
    cmd = ["node", str(generated.GENERATOR), "--format", fmt, "--num-battles", str(num_battles), "--seed", str(seed),
           "--first-index", str(first_index), "--p1", p1, "--p2", p2]
    done = subprocess.run(cmd, capture_output=True, env=node_env(), cwd=REPO_ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout, done.stderr.decode()


@pytest.fixture(scope="module")
def battles():
    """Search as p1 in gen9randombattle and as p2 in gen1ou, 3 battles each: (stdout, stderr) per format."""
    return {"gen9randombattle": run_generator("gen9randombattle", "search", "heuristic", 3, 5),
            "gen1ou": run_generator("gen1ou", "heuristic", "search", 3, 5)}


def test_search_is_a_generated_source_policy():
    assert "search" in generated.POLICIES
    assert generated.GeneratedConfig(p1="search", p2="heuristic").p1 == "search"


def test_search_plays_whole_battles_with_legal_choices(battles):
    for fmt, (stdout, stderr) in battles.items():
        assert not [line for line in stderr.splitlines() if any(f in line for f in FAULTS)], (fmt, stderr)
        # the player reports its decisions (the benchmark reads this line)
        assert "search player: decisions=" in stderr
        side = "p1" if fmt == "gen9randombattle" else "p2"
        records = [json.loads(line) for line in stdout.splitlines()]
        assert len(records) == 3
        for record in records:
            assert record["error"] is None and record["winner"] in ("p1", "p2")
            assert record["players"][side]["policy"] == "search"
            answered = [e for e in record["streams"][side] if e["kind"] == "request" and e["choice"]]
            assert len(answered) >= 5
            assert any(e["choice"].startswith("move") for e in answered)


def test_same_seed_same_bytes(battles):
    stdout, _ = run_generator("gen9randombattle", "search", "heuristic", 3, 5)
    assert stdout == battles["gen9randombattle"][0]
    # a shard starting mid-run reproduces the same records: the set-guess cache depends on nothing run before
    later, _ = run_generator("gen1ou", "heuristic", "search", 2, 5, first_index=1)
    assert later.splitlines() == battles["gen1ou"][0].splitlines()[1:]


# Two battles that differ only in what p2 never shows: moves 2-4 and the Tera type of every p2 Pokémon (p2 always
# picks its first legal choice, so it only ever uses move 1 and never terastallizes). p1 is the search player; the
# battle seed is fixed, so if it reads nothing but its own stream and request, both battles are the same.
HIDDEN_INFO_SCRIPT = r"""
const { BattleStream, getPlayerStreams, Teams, PRNG } = require('pokemon-showdown');
const { legalChoices } = require('./pipelines/showdown/players');
const { POLICIES } = require('./pipelines/showdown/policies');

async function play(p1team, p2team) {
	const streams = getPlayerStreams(new BattleStream());
	const player = new POLICIES.search({ prng: new PRNG([9, 9, 9, 9]), format: 'gen9randombattle', side: 'p1' });
	const seen = [];
	const choices = [];
	const drive = async (stream, answer) => {
		for await (const chunk of stream) {
			const lines = chunk.split('\n').filter(l => !l.startsWith('|t:|'));
			if (lines.length === 1 && lines[0].startsWith('|request|')) {
				const request = JSON.parse(lines[0].slice(9));
				const legal = legalChoices(request);
				if (legal.length) void stream.write(answer(request, legal));
			} else if (stream === streams.p1) {
				seen.push(...lines);
				player.observe(lines);
			}
		}
	};
	const p1 = drive(streams.p1, (request, legal) => {
		const choice = player.choose(request, legal);
		choices.push(choice);
		return choice;
	});
	const p2 = drive(streams.p2, (request, legal) => legal[0].choice);
	void streams.omniscient.write(`>start {"formatid":"gen9randombattle","seed":[1,2,3,4]}\n` +
		`>player p1 {"name":"A","team":${JSON.stringify(Teams.pack(p1team))}}\n` +
		`>player p2 {"name":"B","team":${JSON.stringify(Teams.pack(p2team))}}`);
	await Promise.all([p1, p2]);
	return { seen, choices };
}

(async () => {
	const p1team = Teams.generate('gen9randombattle', { seed: '11,12,13,14' });
	const p2team = Teams.generate('gen9randombattle', { seed: '21,22,23,24' });
	const hidden = p2team.map(set => ({ ...set, moves: [set.moves[0], 'splash', 'growl', 'tailwhip'],
		teraType: set.teraType === 'Fairy' ? 'Ghost' : 'Fairy' }));
	const a = await play(p1team, p2team);
	const b = await play(p1team, hidden);
	process.stdout.write(JSON.stringify({ a, b }));
})();
"""


def test_choices_do_not_depend_on_the_foes_hidden_information():
    done = subprocess.run(["node", "-e", HIDDEN_INFO_SCRIPT], capture_output=True, text=True, env=node_env(),
                          cwd=REPO_ROOT, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    a, b = out["a"], out["b"]
    assert any(line.startswith("|win|") for line in a["seen"])
    assert len(a["choices"]) >= 10
    # what p1 saw is the same in both battles (the hidden part stayed hidden) ...
    assert a["seen"] == b["seen"]
    # ... and so is every choice the search player made
    assert a["choices"] == b["choices"]
