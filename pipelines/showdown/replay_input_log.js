#!/usr/bin/env node
'use strict';
/**
 * Replays Pokémon Showdown input logs on the pinned simulator, giving each player's own stream.
 *
 *   node pipelines/showdown/replay_input_log.js < requests.jsonl > replays.jsonl
 *
 * A Showdown server's battle log (`<id>.log.json`, written by `RoomBattle.logBattle`) keeps the battle's
 * `inputLog`: `>start {"formatid", "seed"}`, one `>player pN {"name", "team"|"seed", ...}` line per player and every
 * choice the simulator committed (`>p1 move thunderbolt`, `>p2 switch 3`, normalized by `Side.getChoice`), then how
 * the battle ended where no move ended it: `>forcelose pN` (a forfeit, or the timer), `>forcewin pN` / `>forcetie`
 * (a staff member's /forcewin, endType `forced`), `>tiebreak`. Written to a fresh simulator in order, those lines
 * play the same battle again, and each player's own stream (its `|request|` JSON and its view of the log) comes
 * out exactly as it did on the server.
 *
 * Each stdin line is one request: `{"input_log": [line, ...], "teams": {"p1": [set, ...], "p2": [...]} | null}`.
 * `teams` (the log's `p1team`/`p2team`) is given to a `>player` line that carries no team, as a random format's
 * does (the simulator generated it from the line's seed): the battle then has the teams the server's had even where
 * the pinned simulator's team generator differs. Each stdout line answers one request, in order:
 *
 *   {"error": null|str, "format", "game_type", "ended", "end": {winner, seed, turns, p1, p2, p1team, p2team,
 *    score, inputLog}|null, "omniscient_log": [line, ...], "streams": {"p1": [event, ...], "p2": [...]}}
 *
 * `end` is the simulator's own end-of-battle record (what the server writes into its log file); `omniscient_log` is
 * the log as the server's file holds it (`getLog(-1)`: each `|split|` resolved to its exact-HP line), without the
 * wall-clock `|t:|` lines. Events are those of pipelines/showdown/generate_battles.js, so one parser reads both:
 * `{"kind": "update", "lines"}`, `{"kind": "request", "request", "choice"}`, `{"kind": "error", "line"}`. A choice is
 * written as the generator's players write it, by the request's move index (`move 2 terastallize`, `switch 3`); a
 * request the battle ended before its player answered (a forfeit, a forced win) is marked `"ended": true`.
 *
 * Only the inputs a battle is made of are replayed. Any other line (`>eval`, which would run its text as code in
 * this process, `>editbattle`, `>requestlog`...) makes the request an error, as does a choice the simulator rejects
 * or one that names no move of its request: `error` says why, and the Python side (pipelines/pokemon/input_log.py)
 * decides what that input becomes. The process serves requests until stdin closes.
 */

const readline = require('readline');
const { BattleStream } = require('pokemon-showdown');
const { extractChannelMessages } = require('pokemon-showdown/dist/sim/battle');

/** The input lines of a battle (pokemon-showdown 0.11.11 `BattleStream._writeLine`); anything else is refused. */
const BATTLE_INPUTS = new Set([
	'start', 'player', 'p1', 'p2', 'forcewin', 'forcetie', 'forcelose', 'tiebreak', 'reseed', 'chat',
	'chat-inputlogonly', 'version', 'version-origin', 'show-openteamsheets',
]);
const SLOTS = ['p1', 'p2'];

class ReplayError extends Error {}

function dropTimestamps(lines) {
	return lines.filter(line => !line.startsWith('|t:|'));
}

/**
 * The request-indexed form of a committed choice (`move thunderbolt zmove` → `move 1 zmove`), as a player writes
 * it: the move is found by its id among the request's moves (`Side.getChoice` writes the id the request lists;
 * a locked move, Recharge, Struggle or gen 1's Fight is the request's only move). Other choices are kept.
 */
function requestChoice(request, choice, slot) {
	const words = choice.split(' ');
	if (words[0] !== 'move' || words.length < 2 || /^\d+$/.test(words[1])) return choice;
	const moves = (request.active && request.active[0] && request.active[0].moves) || [];
	let index = moves.findIndex(move => move.id === words[1]);
	if (index < 0 && moves.length === 1) index = 0;
	if (index < 0) {
		throw new ReplayError(`>${slot} ${choice}: no move ${words[1]} in ${slot}'s request ` +
			`(${moves.map(m => m.id).join(', ') || 'no moves'})`);
	}
	return ['move', String(index + 1), ...words.slice(2)].join(' ');
}

/** A `>player` line's options with the log's team where the line has none (a random format's). */
function withTeam(message, teams) {
	const space = message.indexOf(' ');
	const slot = space < 0 ? message : message.slice(0, space);
	if (!teams || !Array.isArray(teams[slot]) || space < 0) return message;
	const options = JSON.parse(message.slice(space + 1));
	if (options.team) return message;
	options.team = teams[slot];
	return `${slot} ${JSON.stringify(options)}`;
}

/**
 * Replays one input log. `opts.teams`: as a request's `teams`. `opts.endAt` ({turn, input}): once both players
 * face a move request at turn `turn` or later, write `input` (`>forcelose p2`, `>forcetie`) instead of the rest of
 * the log; the result's `end_at` is then the length of `omniscient_log` when it was written (where a server room
 * adds its forfeit message). The generator uses it to end battles as a server's players and staff do.
 */
function replay(inputLog, opts = {}) {
	const result = {
		error: null, format: null, game_type: null, ended: false, end: null, omniscient_log: [],
		streams: { p1: [], p2: [] },
	};
	const pending = { p1: null, p2: null }; // each side's decision request still waiting for its choice
	const stream = new BattleStream({ keepAlive: true });
	const messages = [];
	// what the stream would push to its readers: taken here, in order, as the battle writes it
	stream.pushMessage = (type, data) => messages.push([type, data]);

	const addChunk = (slot, chunk) => {
		const events = result.streams[slot];
		if (!events) return;
		// classified as generate_battles.js's drivePlayer classifies its stream's chunks
		const lines = dropTimestamps(chunk.split('\n'));
		if (lines.length === 1 && lines[0].startsWith('|request|')) {
			const event = { kind: 'request', request: JSON.parse(lines[0].slice('|request|'.length)), choice: null };
			events.push(event);
			pending[slot] = event.request.wait ? null : event;
		} else if (lines.length === 1 && lines[0].startsWith('|error|')) {
			events.push({ kind: 'error', line: lines[0] });
		} else if (lines.length && !(lines.length === 1 && lines[0] === '')) {
			events.push({ kind: 'update', lines });
		}
	};
	const drain = () => {
		for (const [type, data] of messages.splice(0)) {
			if (type === 'update') {
				const channels = extractChannelMessages(data, [-1, 1, 2]);
				for (const line of dropTimestamps(channels[-1])) result.omniscient_log.push(line);
				addChunk('p1', channels[1].join('\n'));
				addChunk('p2', channels[2].join('\n'));
			} else if (type === 'sideupdate') {
				const at = data.indexOf('\n');
				addChunk(data.slice(0, at), data.slice(at + 1));
			} else if (type === 'end') {
				result.end = JSON.parse(data);
			}
		}
	};
	const write = (type, message) => {
		try {
			stream._writeLine(type, message);
			if (stream.battle) stream.battle.sendUpdates();
		} catch (err) {
			throw new ReplayError(`>${type} ${message.slice(0, 120)}: ${err.message}`);
		}
		drain();
	};

	try {
		if (!Array.isArray(inputLog)) throw new ReplayError('inputLog is not a list of lines');
		for (const entry of inputLog) {
			if (typeof entry !== 'string') throw new ReplayError('an inputLog line is not text');
			for (const line of entry.split('\n')) {
				if (!line.startsWith('>')) continue; // not an input (BattleStream skips these too)
				const battle = stream.battle;
				if (opts.endAt && battle && !battle.ended && battle.turn >= opts.endAt.turn &&
					pending.p1 && pending.p2 && battle.requestState === 'move') {
					result.end_at = result.omniscient_log.length;
					const space = opts.endAt.input.indexOf(' ');
					write(opts.endAt.input.slice(1, space < 0 ? undefined : space),
						space < 0 ? '' : opts.endAt.input.slice(space + 1));
					break;
				}
				const space = line.indexOf(' ');
				const type = line.slice(1, space < 0 ? undefined : space);
				let message = space < 0 ? '' : line.slice(space + 1);
				if (!BATTLE_INPUTS.has(type)) {
					throw new ReplayError(`inputLog line "${line.slice(0, 80)}" is not a battle input`);
				}
				if (type === 'start' && !battle) {
					result.format = JSON.parse(message).formatid || null;
				} else if (type === 'player') {
					message = withTeam(message, opts.teams);
				} else if (SLOTS.includes(type)) {
					const event = pending[type];
					if (!event) throw new ReplayError(`>${type} ${message}: ${type} has no request to answer`);
					event.choice = requestChoice(event.request, message, type);
					pending[type] = null;
				}
				write(type, message);
			}
			if (result.end_at !== undefined) break;
		}
	} catch (err) {
		if (!(err instanceof ReplayError) && !(err instanceof SyntaxError)) throw err;
		result.error = err.message;
	}
	const battle = stream.battle;
	result.game_type = battle ? battle.gameType : null;
	result.ended = !!(battle && battle.ended);
	if (result.ended) {
		for (const slot of SLOTS) if (pending[slot]) pending[slot].ended = true;
	}
	return result;
}

function main() {
	const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
	input.on('line', line => {
		if (!line.trim()) return;
		let answer;
		try {
			const request = JSON.parse(line);
			answer = replay(request.input_log, { teams: request.teams || null });
		} catch (err) {
			// a simulator crash on this input (not a ReplayError): this input's, reported, the process goes on
			answer = { error: `simulator crashed: ${err && err.stack || err}`.slice(0, 2000) };
		}
		process.stdout.write(JSON.stringify(answer) + '\n');
	});
}

module.exports = { replay };

if (require.main === module) main();
