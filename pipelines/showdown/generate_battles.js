#!/usr/bin/env node
'use strict';
/**
 * Self-play battle generator for Pokémon Showdown's simulator.
 *
 *   node pipelines/showdown/generate_battles.js --format gen9randombattle \
 *       --num-battles 20 --seed 7 --p1 heuristic --p2 random [--first-index 0] [--max-turns 1000] \
 *       [--p1-teacher search] [--p2-teacher search] [--as-server-log [--end-by forfeit --end-turn 5]]
 *   node pipelines/showdown/generate_battles.js --format gen1ou --export-teams 50 --seed 7
 *
 * Writes one JSON object per battle to stdout (JSON Lines, ordered by battle
 * index); progress, warnings and the final summary go to stderr.
 *
 * --export-teams N plays nothing: it writes N teams of the format, one packed
 * team per line (Showdown's packed format, what a client sends with /utm), each
 * accepted by the format's TeamValidator, built exactly as battle teams are
 * (purpose `export-team`, so they differ from the battles' teams of the same
 * seed). A random format brings its own teams: nothing is written.
 *
 * --p1-teacher / --p2-teacher P: a second player of the scripted policy P labels that slot's decisions without
 * playing. It observes exactly the lines the slot's own player observes and, at each request the slot answers,
 * chooses what it would: the request event records it as `teacher_choice` beside `choice` (what the slot's own
 * player chose and the simulator executed), and the slot's entry in `players` names it (`teacher`). The battle is
 * the one it would be without the teacher; a slot without one writes exactly what it wrote before teachers existed.
 *
 * --as-server-log writes each battle as a Showdown server writes it into its logs folder (`RoomBattle.logBattle`,
 * pokemon-showdown 0.11.11: `<id>.log.json`) instead of the record below: the simulator's end-of-battle data
 * (`winner` by name, `seed`, `turns`, `p1`, `p2`, `p1team`, `p2team`, `score`, `inputLog`), then `log` (the room's
 * log as the server keeps it: each `|split|` resolved to its exact-HP line, the room's `|j|` and `|player|` lines
 * before the simulator's; without `|t:|` lines, which hold the wall clock), `p1rating` and `p2rating` (null: the
 * battles are unrated), `endType`, `ladderError`, `timestamp` (a fixed day plus the battle index in minutes, in the
 * form of JavaScript's Date.toString, in UTC), `roomid` (`battle-<battle id>`) and `format`. The battles are those
 * the records would hold. --end-by ends each battle that reaches turn --end-turn (default 5) as a server's players
 * or staff can, when both players face their move choice of that turn: `forfeit` (one player forfeits: the room's
 * `|-message|<name> forfeited.`, `>forcelose`, endType forfeit), `timer` (the timer runs out on one player: the
 * room's `|inactive|` countdown and `|-message|<name> lost due to inactivity.`, `>forcelose`, endType forfeit) or
 * `forcetie` (a staff member's /forcetie: `>forcetie`, endType forced). The player who leaves is p2 in even-numbered
 * battles and p1 in odd ones. Such a battle is the recorded one up to that turn, played again from its input log
 * to the end (pipelines/showdown/replay_input_log.js). A battle the generator had to end itself (the turn limit)
 * is written as forced tie; one that never ended is not written (the summary counts it as an error).
 *
 * Determinism: every seed (battle PRNG, teams, player and teacher PRNGs) is derived from
 * (--seed, battle index, purpose) with SHA-256, and `|t:|` timestamp lines are
 * dropped, so the same arguments give byte-identical output. Battles are
 * independent, so `--first-index` can shard a run across processes.
 */

const crypto = require('crypto');
const { BattleStream, getPlayerStreams, Dex, Teams, TeamValidator, PRNG } = require('pokemon-showdown');
const readline = require('readline');
const { extractChannelMessages } = require('pokemon-showdown/dist/sim/battle');
const { legalChoices } = require('./players');
const { POLICIES: SCRIPTED } = require('./policies');
const { replay } = require('./replay_input_log');

// ---------------------------------------------------------------------------
// Remote players: a policy outside this process chooses
// ---------------------------------------------------------------------------

/**
 * The process that started the generator answers for a `remote` player (a trained policy in Python: see
 * pipelines/pokemon/generated.py). Each request becomes one `{"ask": n, "battle", "side", "lines", "request"}`
 * line on stdout, beside the battle records (which have no `ask` key); the answer comes back on stdin as
 * `{"ask": n, "choice": "move 2"}` (`choice: null` takes the first legal choice). `lines` are the player-stream
 * lines seen since the side's last ask, so the asker sees exactly what a scripted player's observe() sees.
 */
const asks = { next: 0, waiting: new Map(), reader: null };

function remoteAnswers() {
	if (!asks.reader) {
		asks.reader = readline.createInterface({ input: process.stdin });
		asks.reader.on('line', line => {
			if (!line.trim()) return;
			const answer = JSON.parse(line);
			const resolve = asks.waiting.get(answer.ask);
			if (!resolve) throw new Error(`answer to unknown ask ${answer.ask}`);
			asks.waiting.delete(answer.ask);
			resolve(answer.choice);
		});
		asks.reader.on('close', () => {
			for (const [n, resolve] of asks.waiting) {
				process.stderr.write(`ask ${n}: stdin closed before its answer\n`);
				resolve(undefined);
			}
			asks.waiting.clear();
		});
	}
	return asks;
}

class RemotePlayer {
	/** @param {object} opts {battleId, side} */
	constructor(opts) {
		this.battleId = opts.battleId;
		this.side = opts.side;
		this.seen = [];
		remoteAnswers();
	}

	observe(lines) {
		for (const line of lines) this.seen.push(line);
	}

	choose(request, legal) {
		const n = asks.next++;
		const lines = this.seen;
		this.seen = [];
		return new Promise(resolve => {
			asks.waiting.set(n, resolve);
			void writeLine(JSON.stringify({ ask: n, battle: this.battleId, side: this.side, lines, request }));
		}).then(choice => (choice === null ? legal[0].choice : choice));
	}
}

const POLICIES = { ...SCRIPTED, remote: RemotePlayer };

const MAX_TEAM_ATTEMPTS = 200;

// ---------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------

function parseArgs(argv) {
	const opts = {
		format: 'gen9randombattle', numBattles: 1, seed: 0, firstIndex: 0,
		p1: 'heuristic', p2: 'random', maxTurns: 1000, exportTeams: 0, p1Teacher: null, p2Teacher: null,
		asServerLog: false, endBy: null, endTurn: 5,
	};
	const names = {
		'--format': 'format', '--num-battles': 'numBattles', '--seed': 'seed',
		'--first-index': 'firstIndex', '--p1': 'p1', '--p2': 'p2', '--max-turns': 'maxTurns',
		'--export-teams': 'exportTeams', '--p1-teacher': 'p1Teacher', '--p2-teacher': 'p2Teacher',
		'--end-by': 'endBy', '--end-turn': 'endTurn',
	};
	for (let i = 0; i < argv.length; i++) {
		let arg = argv[i];
		let value;
		if (arg.includes('=')) [arg, value] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
		if (arg === '-h' || arg === '--help') {
			process.stderr.write('usage: generate_battles.js --format F --num-battles N --seed S ' +
				`--p1 ${Object.keys(POLICIES).join('|')} --p2 ... [--first-index I] [--max-turns T] ` +
				`[--p1-teacher ${Object.keys(SCRIPTED).join('|')}] [--p2-teacher ...] ` +
				`[--as-server-log [--end-by ${Object.keys(END_INPUTS).join('|')}] [--end-turn T]]\n` +
				'       generate_battles.js --format F --export-teams N --seed S [--first-index I]\n');
			process.exit(0);
		}
		if (arg === '--as-server-log') {
			opts.asServerLog = true;
			continue;
		}
		const key = names[arg];
		if (!key) throw new Error(`unknown argument ${arg}`);
		if (value === undefined) value = argv[++i];
		if (value === undefined) throw new Error(`missing value for ${arg}`);
		opts[key] = value;
	}
	for (const key of ['numBattles', 'seed', 'firstIndex', 'maxTurns', 'exportTeams', 'endTurn']) {
		const n = Number(opts[key]);
		if (!Number.isInteger(n) || n < 0) throw new Error(`--${key} must be a non-negative integer`);
		opts[key] = n;
	}
	for (const p of ['p1', 'p2']) {
		if (!POLICIES[opts[p]]) throw new Error(`unknown policy ${opts[p]} (have: ${Object.keys(POLICIES).join(', ')})`);
		// A teacher chooses at once, beside the slot's own player: a scripted policy, never a remote one.
		const teacher = opts[`${p}Teacher`];
		if (teacher !== null && !SCRIPTED[teacher]) {
			throw new Error(`unknown --${p}-teacher ${teacher} (a scripted policy: ${Object.keys(SCRIPTED).join(', ')})`);
		}
	}
	if (opts.endBy !== null && !END_INPUTS[opts.endBy]) {
		throw new Error(`unknown --end-by ${opts.endBy} (have: ${Object.keys(END_INPUTS).join(', ')})`);
	}
	if (opts.endBy !== null && !opts.asServerLog) throw new Error('--end-by needs --as-server-log');
	const format = Dex.formats.get(opts.format);
	if (!format.exists || format.effectType !== 'Format') throw new Error(`unknown format ${opts.format}`);
	if ((format.gameType || 'singles') !== 'singles') throw new Error(`only singles formats are supported`);
	opts.format = format.id;
	return opts;
}

// ---------------------------------------------------------------------------
// Seeds and teams
// ---------------------------------------------------------------------------

/** Gen-5 PRNG seed [a,b,c,d] (16-bit words) for one purpose of one battle. */
function deriveSeed(seed, index, purpose) {
	const digest = crypto.createHash('sha256').update(`replayforge|${seed}|${index}|${purpose}`).digest();
	return [0, 2, 4, 6].map(off => digest.readUInt16BE(off));
}

/**
 * Team for a non-random format: random-battle sets of the same generation at
 * the format's level, kept only if the format's validator accepts them.
 * Returns the packed team (the validator may normalise sets, so pack after it).
 */
function buildTeam(format, seed, index, slot) {
	const dex = Dex.forFormat(format);
	const generator = `gen${dex.gen}randombattle`;
	const validator = TeamValidator.get(format.id);
	const ruleTable = dex.formats.getRuleTable(format);
	const level = ruleTable.adjustLevel || ruleTable.maxLevel || 100;
	let lastProblems = [];
	for (let attempt = 0; attempt < MAX_TEAM_ATTEMPTS; attempt++) {
		const teamSeed = deriveSeed(seed, index, `${slot}-team-${attempt}`).join(',');
		const team = Teams.generate(generator, { seed: teamSeed }).map(set => ({ ...set, level }));
		const problems = validator.validateTeam(team);
		if (!problems) return Teams.pack(team);
		lastProblems = problems;
	}
	throw new Error(`no valid ${format.id} team after ${MAX_TEAM_ATTEMPTS} attempts: ${lastProblems.join('; ')}`);
}

// ---------------------------------------------------------------------------
// One battle
// ---------------------------------------------------------------------------

/** A slot's entry in the record's `players`: its name and policy, and its teacher where it has one. */
function playerEntry(opts, slot) {
	const entry = { name: policyLabel(opts[slot], slot), policy: opts[slot] };
	if (opts[`${slot}Teacher`] !== null) entry.teacher = opts[`${slot}Teacher`];
	return entry;
}

function policyLabel(policy, slot) {
	return `${policy.charAt(0).toUpperCase()}${policy.slice(1)} Bot ${slot.slice(1)}`;
}

function dropTimestamps(chunk) {
	return chunk.split('\n').filter(line => !line.startsWith('|t:|'));
}

/** The battle currently running; the stall watchdog (see main) aborts it. */
let currentBattle = null;

/** A battle's output record, before anything happened (key order = output order). */
function emptyRecord(opts, index) {
	return {
		battle_id: `${opts.format}-${opts.seed}-${index}`,
		format: opts.format,
		seed: deriveSeed(opts.seed, index, 'battle'),
		index,
		players: { p1: playerEntry(opts, 'p1'), p2: playerEntry(opts, 'p2') },
		winner: null,
		num_turns: 0,
		error: null,
		spectator_log: [],
		streams: { p1: [], p2: [] },
	};
}

async function runBattle(opts, index) {
	const format = Dex.formats.get(opts.format);
	const record = emptyRecord(opts, index);
	const battleSeed = record.seed;

	const battleStream = new BattleStream();
	const streams = getPlayerStreams(battleStream);
	let error = null;
	let ended = false;
	const fail = message => {
		if (!error) error = message;
		if (!ended) {
			ended = true;
			process.stderr.write(`[battle ${index}] ${message}\n`);
			// Ends the battle cleanly (emits |tie and closes every stream).
			try {
				void streams.omniscient.write('>forcetie');
			} catch (err) {
				process.stderr.write(`[battle ${index}] could not force a tie: ${err.message}\n`);
			}
		}
	};

	let abort;
	const aborted = new Promise(resolve => {
		abort = message => {
			fail(message);
			resolve();
		};
	});

	const makePlayer = (Policy, slot, purpose) => new Policy({
		prng: new PRNG(deriveSeed(opts.seed, index, `${slot}-${purpose}`).join(',')),
		format: opts.format, side: slot, battleId: record.battle_id,
	});
	const drivers = ['p1', 'p2'].map(slot => drivePlayer({
		slot, stream: streams[slot], events: record.streams[slot], fail,
		player: makePlayer(POLICIES[opts[slot]], slot, 'policy'),
		teacher: opts[`${slot}Teacher`] === null ? null : makePlayer(SCRIPTED[opts[`${slot}Teacher`]], slot, 'teacher'),
	}));

	const spectator = (async () => {
		for await (const chunk of streams.spectator) {
			for (const line of dropTimestamps(chunk)) {
				record.spectator_log.push(line);
				if (line.startsWith('|turn|')) {
					record.num_turns = Number(line.slice(6));
					if (record.num_turns > opts.maxTurns) fail(`turn limit exceeded (${opts.maxTurns} turns)`);
				} else if (line.startsWith('|win|')) {
					const name = line.slice(5);
					record.winner = ['p1', 'p2'].find(s => record.players[s].name === name) || null;
				} else if (line.includes('You have hit the turn limit!')) {
					fail('turn limit reached (simulator auto-tie)');
				}
			}
		}
	})();

	currentBattle = { abort };
	const setup = (async () => {
		const start = { formatid: opts.format, seed: battleSeed };
		void streams.omniscient.write(`>start ${JSON.stringify(start)}`);
		for (const slot of ['p1', 'p2']) {
			const options = { name: record.players[slot].name };
			if (format.team) {
				// Random formats: let the simulator's own generator build the team.
				options.seed = deriveSeed(opts.seed, index, `${slot}-team-0`).join(',');
			} else {
				options.team = buildTeam(format, opts.seed, index, slot);
			}
			void streams.omniscient.write(`>player ${slot} ${JSON.stringify(options)}`);
		}
	})();
	const done = Promise.allSettled([setup, spectator, ...drivers]).then(results => {
		results.forEach((r, i) => {
			if (r.status !== 'rejected') return;
			const what = i === 0 ? 'setup error' : 'simulator error';
			fail(`${what}: ${r.reason && r.reason.message || r.reason}`);
		});
	});
	await Promise.race([done, aborted]);
	currentBattle = null;

	if (error) {
		record.error = error;
		record.winner = null;
	}
	return [record, battleStream.battle];
}

// ---------------------------------------------------------------------------
// Server logs (--as-server-log)
// ---------------------------------------------------------------------------

/** How --end-by ends a battle: the input the server writes and the log file's endType. */
const END_INPUTS = {
	forfeit: { input: slot => `>forcelose ${slot}`, endType: 'forfeit' },
	timer: { input: slot => `>forcelose ${slot}`, endType: 'forfeit' },
	forcetie: { input: () => '>forcetie', endType: 'forced' },
};

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** `Date.toString()` of a UTC time, whatever this machine's time zone: the form of a server log's `timestamp`. */
function utcDateString(ms) {
	const d = new Date(ms);
	const two = n => String(n).padStart(2, '0');
	return `${DAYS[d.getUTCDay()]} ${MONTHS[d.getUTCMonth()]} ${two(d.getUTCDate())} ${d.getUTCFullYear()} ` +
		`${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())} GMT+0000 (Coordinated Universal Time)`;
}

/** A battle's log as a server room keeps it: `|split|` resolved to the exact-HP lines, no `|t:|` lines. */
function omniscientLog(battle) {
	return extractChannelMessages(battle.log.join('\n'), [-1])[-1].filter(line => !line.startsWith('|t:|'));
}

/**
 * One battle as a server's log file (see --as-server-log), or null for a battle that never ended. `end` is the
 * simulator's end-of-battle data, `lines` the battle's log; `endType` and the room's own lines say how it ended.
 */
function serverLogOf(opts, index, record, battle) {
	if (!battle || !battle.ended) return null;
	let end = {
		winner: battle.winner, seed: battle.prngSeed, turns: battle.turn, p1: battle.sides[0].name,
		p2: battle.sides[1].name, p1team: battle.sides[0].team, p2team: battle.sides[1].team,
		score: [battle.sides[0].pokemonLeft, battle.sides[1].pokemonLeft], inputLog: battle.inputLog,
	};
	let lines = omniscientLog(battle);
	let endType = record.error ? 'forced' : 'normal'; // the generator's own >forcetie (turn limit) is a forced end
	let roomLines = []; // the room's lines where the battle was ended: [position in lines, line]
	if (opts.endBy && !record.error) {
		const slot = index % 2 === 0 ? 'p2' : 'p1';
		const how = END_INPUTS[opts.endBy];
		const cut = replay(battle.inputLog, { endAt: { turn: opts.endTurn, input: how.input(slot) } });
		if (cut.error) throw new Error(`ending battle ${index} by ${opts.endBy}: ${cut.error}`);
		if (cut.end_at !== undefined) {
			const name = cut.end[slot];
			end = cut.end;
			lines = cut.omniscient_log;
			endType = how.endType;
			const said = opts.endBy === 'forfeit' ? [`|-message|${name} forfeited.`] :
				opts.endBy === 'timer' ? [`|inactive|${name} has 30 seconds left.`,
					`|inactive|${name} has 10 seconds left.`, `|-message|${name} lost due to inactivity.`] : [];
			roomLines = said.map(line => [cut.end_at, line]);
		}
	}
	const log = [`|j|☆${end.p1}`, `|j|☆${end.p2}`, `|player|p1|${end.p1}||`, `|player|p2|${end.p2}||`];
	lines.forEach((line, i) => {
		for (const [at, roomLine] of roomLines) if (at === i) log.push(roomLine);
		log.push(line);
	});
	return {
		...end, log, p1rating: null, p2rating: null, endType, ladderError: true,
		timestamp: utcDateString(Date.UTC(2024, 0, 1) + index * 60000), roomid: `battle-${record.battle_id}`,
		format: opts.format,
	};
}

/**
 * Feeds one player's stream to its policy and answers its requests.
 *
 * Records each chunk as an event, in the order received. A chunk from the
 * simulator is either a log update (one chunk = one event) or a single
 * sideupdate line (`|request|...`, `|error|...`).
 *
 * A `teacher` (or null) sees the same updates as the player and chooses at each
 * request the player answers, before the player does; its choice is recorded
 * (`teacher_choice`, null at a wait request) and never sent. A teacher that
 * throws ends the battle as an error: a made-up label would be worse than none.
 */
async function drivePlayer({ slot, stream, events, player, teacher, fail }) {
	// The request we last answered: {event, legal, tried}. Its `choice` is
	// rewritten if the simulator rejects the answer, so that the record only
	// holds the choice the simulator actually executed.
	let pending = null;

	const answer = (event, choice) => {
		event.choice = choice;
		void stream.write(choice);
	};

	const onRequest = request => {
		const event = { kind: 'request', request, choice: null };
		if (teacher) event.teacher_choice = null;
		events.push(event);
		pending = null;
		const legal = legalChoices(request);
		if (!legal.length) return; // wait request
		if (teacher) {
			try {
				// its own copies: nothing the teacher does to them can reach the player's choice or the record
				event.teacher_choice = teacher.choose(structuredClone(request), legalChoices(request));
			} catch (err) {
				process.stderr.write(`[${slot}] teacher crashed: ${err.stack}\n`);
				fail(`${slot}: teacher crashed: ${err.message}`);
			}
		}
		let choice;
		try {
			choice = player.choose(request, legal);
		} catch (err) {
			process.stderr.write(`[${slot}] policy crashed (${err.stack}); using first legal choice\n`);
		}
		// A remote player answers later; a scripted one at once, with no tick between request and answer.
		if (choice && typeof choice.then === 'function') return choice.then(c => settle(event, request, legal, c));
		settle(event, request, legal, choice);
		return null;
	};

	const settle = (event, request, legal, choice) => {
		const allowed = request.teamPreview ? /^team \d+$/.test(choice || '') :
			legal.some(c => c.choice === choice);
		if (!allowed) {
			if (choice !== undefined) process.stderr.write(`[${slot}] policy chose illegal "${choice}"; using first legal choice\n`);
			choice = legal[0].choice;
		}
		pending = { event, legal, tried: new Set([choice]) };
		answer(event, choice);
	};

	const onError = line => {
		events.push({ kind: 'error', line });
		process.stderr.write(`[${slot}] simulator: ${line}\n`);
		if (!pending) return;
		if (line.startsWith('|error|[Unavailable choice]')) {
			// The simulator follows up with an updated request (update: true)
			// which gets answered like any other; the rejected one executed nothing.
			pending.event.choice = null;
			pending = null;
			return;
		}
		const next = pending.legal.find(c => !pending.tried.has(c.choice));
		if (!next) {
			pending.event.choice = null;
			fail(`${slot}: every legal choice was rejected`);
			return;
		}
		pending.tried.add(next.choice);
		answer(pending.event, next.choice);
	};

	for await (const chunk of stream) {
		const lines = dropTimestamps(chunk);
		if (lines.length === 1 && lines[0].startsWith('|request|')) {
			const answered = onRequest(JSON.parse(lines[0].slice('|request|'.length)));
			if (answered) await answered;
		} else if (lines.length === 1 && lines[0].startsWith('|error|')) {
			onError(lines[0]);
		} else if (lines.length && !(lines.length === 1 && lines[0] === '')) {
			events.push({ kind: 'update', lines });
			pending = null; // the battle moved on: our last answer was accepted
			player.observe(lines);
			if (teacher) teacher.observe(lines);
		}
	}
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

function writeLine(line) {
	return new Promise((resolve, reject) => {
		const ok = process.stdout.write(line + '\n', err => (err ? reject(err) : null));
		if (ok) resolve();
		else process.stdout.once('drain', resolve);
	});
}

/** --export-teams: validated packed teams of a non-random format, one a line. */
async function exportTeams(opts) {
	const format = Dex.formats.get(opts.format);
	if (format.team) {
		process.stderr.write(`${format.id} brings its own teams (random format): none exported\n`);
		return;
	}
	for (let index = opts.firstIndex; index < opts.firstIndex + opts.exportTeams; index++) {
		await writeLine(buildTeam(format, opts.seed, index, 'export'));
	}
	process.stderr.write(`summary: format=${format.id} teams=${opts.exportTeams}\n`);
}

async function main() {
	let opts;
	try {
		opts = parseArgs(process.argv.slice(2));
	} catch (err) {
		process.stderr.write(`error: ${err.message}\n`);
		process.exit(2);
	}

	// If the event loop runs dry while a battle is unfinished, nobody is ever
	// going to answer (a player missed a request): end that battle as an error
	// instead of letting node exit silently mid-run.
	process.on('beforeExit', () => {
		if (currentBattle) currentBattle.abort('stalled: no player had a pending decision');
	});
	process.stdout.on('error', err => {
		if (err.code === 'EPIPE') process.exit(0);
		throw err;
	});

	if (opts.exportTeams) {
		await exportTeams(opts);
		return;
	}
	const stats = { battles: 0, p1: 0, p2: 0, ties: 0, errors: 0, turns: 0 };
	const t0 = process.hrtime.bigint();
	const last = opts.firstIndex + opts.numBattles;
	for (let index = opts.firstIndex; index < last; index++) {
		let record;
		let battle = null;
		try {
			[record, battle] = await runBattle(opts, index);
		} catch (err) {
			process.stderr.write(`[battle ${index}] ${err.stack}\n`);
			record = emptyRecord(opts, index);
			record.error = String(err.message || err);
		}
		if (!opts.asServerLog) {
			await writeLine(JSON.stringify(record));
		} else {
			const log = serverLogOf(opts, index, record, battle);
			if (log) await writeLine(JSON.stringify(log));
		}
		stats.battles++;
		stats.turns += record.num_turns;
		if (record.error) stats.errors++;
		if (record.winner) stats[record.winner]++;
		else if (!record.error) stats.ties++;
		if (stats.battles % 50 === 0) process.stderr.write(`... ${stats.battles}/${opts.numBattles} battles\n`);
	}
	if (asks.reader) asks.reader.close();
	const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
	process.stderr.write(
		`summary: format=${opts.format} battles=${stats.battles} ` +
		`p1(${opts.p1}) wins=${stats.p1} p2(${opts.p2}) wins=${stats.p2} ties=${stats.ties} errors=${stats.errors} ` +
		`avg_turns=${(stats.turns / Math.max(1, stats.battles)).toFixed(1)} ` +
		`battles/s=${(stats.battles / Math.max(seconds, 1e-9)).toFixed(2)}\n`
	);
}

main().catch(err => {
	process.stderr.write(`fatal: ${err.stack}\n`);
	process.exit(1);
});
