#!/usr/bin/env node
'use strict';
/**
 * The generator's scripted players (players.js), answering for a client on a Showdown server.
 *
 *   node pipelines/showdown/policy_server.js --policy heuristic --seed 0
 *
 * Reads one JSON object a line on stdin and answers each ask with one line on stdout:
 *   {"battle": tag, "format": id, "lines": [...], "request": {...}}  ->  {"choice": "move 2"}
 *   {"battle": tag, "forget": true}                                  ->  (nothing: the battle is over)
 * `lines` are the protocol lines of that battle the client received since its last ask (requests excluded), so a
 * player sees what it sees inside the generator: its own side's stream. A battle's player is made at its first
 * ask (the request names the side), with a PRNG seeded from (--seed, battle tag, policy), as the generator seeds
 * its players from (seed, battle index). A request with nothing to choose (`wait`) is answered {"choice": null}.
 */

const crypto = require('crypto');
const readline = require('readline');
const { PRNG } = require('pokemon-showdown');
const { legalChoices } = require('./players');
const { POLICIES } = require('./policies');

function parseArgs(argv) {
	const opts = { policy: 'heuristic', seed: 0 };
	for (let i = 0; i < argv.length; i += 2) {
		const [arg, value] = [argv[i], argv[i + 1]];
		if (arg === '--policy') opts.policy = value;
		else if (arg === '--seed') opts.seed = Number(value);
		else throw new Error(`unknown argument ${arg}`);
	}
	if (!POLICIES[opts.policy]) throw new Error(`unknown policy ${opts.policy} (have: ${Object.keys(POLICIES).join(', ')})`);
	if (!Number.isInteger(opts.seed) || opts.seed < 0) throw new Error('--seed must be a non-negative integer');
	return opts;
}

function playerSeed(seed, tag, policy) {
	const digest = crypto.createHash('sha256').update(`replayforge|${seed}|${tag}|${policy}`).digest();
	return [0, 2, 4, 6].map(off => digest.readUInt16BE(off)).join(',');
}

function main() {
	let opts;
	try {
		opts = parseArgs(process.argv.slice(2));
	} catch (err) {
		process.stderr.write(`error: ${err.message}\n`);
		process.exit(2);
	}
	const battles = new Map(); // tag -> {player, pending lines before it existed}
	const reader = readline.createInterface({ input: process.stdin });
	reader.on('line', text => {
		if (!text.trim()) return;
		const ask = JSON.parse(text);
		if (ask.forget) {
			battles.delete(ask.battle);
			return;
		}
		let battle = battles.get(ask.battle);
		if (!battle) battles.set(ask.battle, battle = { player: null, early: [] });
		const lines = ask.lines || [];
		if (battle.player) battle.player.observe(lines);
		else battle.early.push(...lines);
		const legal = legalChoices(ask.request);
		if (!legal.length) {
			process.stdout.write('{"choice":null}\n');
			return;
		}
		if (!battle.player) {
			battle.player = new POLICIES[opts.policy]({
				prng: new PRNG(playerSeed(opts.seed, ask.battle, opts.policy)), format: ask.format,
				side: ask.request.side.id,
			});
			battle.player.observe(battle.early);
			battle.early = [];
		}
		let choice;
		try {
			choice = battle.player.choose(ask.request, legal);
		} catch (err) {
			process.stderr.write(`[${ask.battle}] policy crashed (${err.stack}); using first legal choice\n`);
		}
		const allowed = ask.request.teamPreview ? /^team \d+$/.test(choice || '') : legal.some(c => c.choice === choice);
		if (!allowed) {
			if (choice !== undefined) process.stderr.write(`[${ask.battle}] policy chose illegal "${choice}"; using first legal choice\n`);
			choice = legal[0].choice;
		}
		process.stdout.write(JSON.stringify({ choice }) + '\n');
	});
}

main();
