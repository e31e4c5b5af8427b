'use strict';
/**
 * The `search` player: a one-turn lookahead whose damage numbers come from the simulator's own damage code.
 *
 * What it knows, and from where (never the other side's request or `Side` object):
 *  - its own team exactly, from its `|request|`: species, level, moves, item, ability, tera type, stats, HP,
 *    status; boosts from its own log (HeuristicPlayer's tracking);
 *  - the foe's Pokémon from its own stream only: species and level from `|switch|` details, HP as a fraction,
 *    status, boosts, moves used, items and abilities revealed (`|-item|`, `|-enditem|`, `[from] item:`,
 *    `[from] ability:`), Terastallization. The hidden rest of a set is the most likely one among sets that the
 *    format's own random-battle generator draws for that species (`Teams.getGenerator(...).randomSet`, the same
 *    code and data that built the foe's team: gen9randombattle, and gen1randombattle sets for gen1ou), keeping
 *    the draws consistent with what was revealed.
 *
 * How it decides: both teams go into a hypothetical `Battle` of the same format (rebuilt only when a set guess
 * changes), HP/status/boosts are written onto its Pokémon, and `battle.actions.getDamage` (the engine's damage
 * formula: stats, items, abilities, weather, STAB, Tera, type chart, burn; gen 1's own formula in gen 1) gives each
 * move's damage with the random roll fixed at its mean (0.925), crits as an expected factor, times accuracy and
 * expected hits. For every own choice (move, move + Tera, switch) × each likely foe move the turn is played out
 * in closed form (priority, then engine speed; a KO stops the slower move; switches take the hit), and the
 * position after it is scored by the HP fractions lost and taken plus who wins the damage race between the two
 * actives from there (turns to KO each way, speed for ties, turns lost to sleep/freeze, paralysis). Status moves
 * that inflict a status and self-boosting moves are scored the same way, with the engine recomputing speed and
 * damage under the new status or stages; other status moves keep HeuristicPlayer's values (same unit: fraction
 * of a foe's HP). The foe's reply is modelled as its strongest likely move 60% of the time, the rest spread by
 * how likely each move is.
 *
 * Why not a lookahead over cloned battles: measured on this machine (pokemon-showdown 0.11.11, node 20),
 * `State.deserializeBattle` costs 1.5-1.9 ms and one simulated turn 5-12 ms with it, so the ~50 pairs a decision
 * needs would take 0.3-0.6 s per decision: more than the 1.4 s a battle may cost. One `getDamage` call costs
 * ~50 µs and building the hypothetical battle 3-5 ms.
 *
 * Measured (benchmarks/search_teacher.py, results/search-teacher-2026-11-26; 200 battles a pair, each battle
 * played from both seats; CPU time of the generator process, on a shared 2-core machine): against the heuristic
 * player 74.0% [67.5, 79.6] in gen9randombattle and 60.8% [53.8, 67.2] in gen1ou, against random 100% in both;
 * 2.6-10 CPU ms per decision; 0.16-0.37 CPU s per battle against a scripted player, 0.56-0.76 (gen9) and
 * 0.26-0.34 (gen1) search vs search (three runs on a loaded machine), so 5,000 battles on 2 cores take
 * 0.11-0.26 h (0.39-0.53 h search vs search): the 1.4 s per battle budget holds with room to spare.
 * Tuning, gen9randombattle vs heuristic, same 200 battles: race weight 0.5 -> 127 wins, 0.8 -> 142, 1.0 -> 137;
 * foe model 0.9 greedy -> 141 (gen1ou: 120 vs 116 at 0.6), kept at 0.6.
 *
 * Deterministic: the hypothetical battle has a fixed seed, its roll and crits are fixed, set draws are seeded by
 * the species alone (so a process-wide cache gives the same guesses whatever order battles run in), and ties
 * between choices are broken with the player's own PRNG.
 */

const crypto = require('crypto');
const { Battle, Dex, Teams, toID } = require('pokemon-showdown');
const players = require('./players');

const { HeuristicPlayer, hpFraction, isFainted, statusOf, parseIdent, parseDetails } = players;

/** Sets drawn per species to estimate the foe's hidden set (random sets have 1-4 roles; 40 draws show each). */
const SET_DRAWS = 40;
/** Expected damage roll: the simulator draws 85..100 % uniformly. */
const MEAN_ROLL = 0.925;
/** Share of the foe model on the foe's strongest likely move; the rest follows the moves' likelihoods. */
const FOE_GREEDY = 0.6;
/** Weight of the damage race between the actives, next to the HP already on both teams. */
const RACE_WEIGHT = 0.8;
/** A choice must beat the best plain move by this much to spend the battle's one Terastallization. */
const TERA_MARGIN = 0.08;
/**
 * Cost of a switch beyond the hit it takes (tempo, and the foe may switch too). Measured against the heuristic in
 * gen1ou, 200 battles a setting on the same seeds: 0.08 -> 117 wins, 0.15 -> 116, no switching at all -> 107.
 */
const SWITCH_COST = 0.15;
/** Foe moves at least this likely are assumed known in full; rarer ones count by their likelihood. */
const LIKELY_MOVE = 0.5;
/** Damage-callback moves whose engine callback only needs HP and level (others read battle history). */
const PLAIN_CALLBACKS = new Set(['superfang', 'naturesmadness', 'ruination', 'endeavor', 'finalgambit',
	'guardianofalola', 'counter', 'mirrorcoat', 'metalburst', 'bide', 'comeuppance']);
/** HeuristicPlayer's values of inflicting a status (fraction of a foe's HP), for damaging moves' side effects. */
const STATUS_WORTH = { slp: 0.45, par: 0.3, tox: 0.3, brn: 0.3, psn: 0.15, frz: 0.45 };
const HISTORY_CALLBACKS = new Set(['counter', 'mirrorcoat', 'metalburst', 'bide', 'comeuppance']);

/** species id -> [{set, count}] and move likelihoods; shared by all search players of a process. */
const SET_CACHE = new Map();
/** Search decisions and their wall time in this process, reported on stderr at exit (benchmarks read it). */
const TIMING = { decisions: 0, ms: 0, cpuMs: 0, hooked: false };

function speciesSeed(format, speciesId) {
	const digest = crypto.createHash('sha256').update(`replayforge-search|${format}|${speciesId}`).digest();
	return [0, 2, 4, 6].map(off => digest.readUInt16BE(off));
}

/** A move id as the sets write it ("hiddenpowerfire60" in requests of old gens -> "hiddenpowerfire"). */
function moveKey(id) {
	return /^hiddenpower/.test(id) ? id.replace(/\d+$/, '') : id;
}

/**
 * The random-battle sets the format's generator draws for a species, grouped: [{set, count}], most common
 * first (ties in draw order). Empty when the generator has no data for the species.
 */
function drawnSets(generatorFormat, speciesName) {
	const dex = Dex.forFormat(generatorFormat);
	const species = dex.species.get(speciesName);
	const key = `${generatorFormat}|${species.id}`;
	if (SET_CACHE.has(key)) return SET_CACHE.get(key);
	const groups = new Map();
	for (const candidate of [species.id, toID(species.baseSpecies)]) {
		const generator = Teams.getGenerator(generatorFormat, speciesSeed(generatorFormat, candidate));
		// Gen 1's generator keeps its sets in `randomData` (it inherits gen 9's `randomSets`, of other species).
		const table = (dex.gen === 1 ? generator.randomData : generator.randomSets) || {};
		if (!table[candidate]) continue;
		for (let i = 0; i < SET_DRAWS; i++) {
			const set = generator.randomSet(candidate, {}, false, false); // gen 1's takes only the species
			set.moves = set.moves.map(m => moveKey(toID(m)));
			const id = [set.moves.slice().sort().join(','), toID(set.item), toID(set.ability), set.teraType].join('|');
			if (groups.has(id)) groups.get(id).count++;
			else groups.set(id, { set, count: 1 });
		}
		break;
	}
	const sets = [...groups.values()].sort((a, b) => b.count - a.count);
	SET_CACHE.set(key, sets);
	return sets;
}

class SearchPlayer extends HeuristicPlayer {
	/** @param {object} opts {prng, format, side} */
	constructor(opts) {
		super(opts);
		this.format = opts.format;
		this.generatorFormat = Dex.formats.get(opts.format).team ? opts.format : `gen${this.gen}randombattle`;
		this.foeSideId = this.sideId === 'p1' ? 'p2' : 'p1';
		this.foeInfo = {}; // name -> {species, level, hp, status, item, itemSeen, ability, tera}
		this.mySide = new Set(); // hazards on our side
		this.mySpikes = 0;
		this.weather = '';
		this.sim = null; // {key, battle, mine: {name -> Pokemon}, foes: {name -> Pokemon}}
		if (!TIMING.hooked) {
			TIMING.hooked = true;
			process.on('exit', () => {
				const n = Math.max(1, TIMING.decisions);
				process.stderr.write(`search player: decisions=${TIMING.decisions} ` +
					`ms_per_decision=${(TIMING.ms / n).toFixed(2)} cpu_ms_per_decision=${(TIMING.cpuMs / n).toFixed(2)}\n`);
			});
		}
	}

	// -- log tracking (on top of HeuristicPlayer's) --------------------------

	observeLine(cmd, args) {
		super.observeLine(cmd, args);
		const who = parseIdent(args[0]);
		const foe = who.side === this.foeSideId;
		const info = foe ? this.foeInfo[who.name] : null;
		switch (cmd) {
		case 'switch': case 'drag': case 'replace':
			if (foe) {
				const { species, level } = parseDetails(args[1]);
				const prev = this.foeInfo[who.name] || { item: undefined, itemSeen: '', ability: '', tera: '' };
				this.foeInfo[who.name] = { ...prev, species, level, hp: args[2] ? hpFraction(args[2]) : 1,
					status: args[2] ? statusOf(args[2]) : '' };
			}
			break;
		case 'detailschange':
			if (info) info.species = parseDetails(args[1]).species;
			break;
		case '-damage': case '-heal': case '-sethp':
			if (info) info.hp = hpFraction(args[1]);
			break;
		case '-status':
			if (info) info.status = args[1];
			break;
		case '-curestatus':
			if (info) info.status = '';
			break;
		case '-cureteam':
			if (foe) for (const i of Object.values(this.foeInfo)) i.status = '';
			break;
		case 'faint':
			if (info) info.hp = 0;
			break;
		case '-terastallize':
			if (info) info.tera = args[1];
			break;
		case '-item':
			if (info) {
				info.item = toID(args[1]);
				if (!/\[from\] move: (Trick|Switcheroo)/.test(args.join('|')) && !info.itemSeen) info.itemSeen = info.item;
			}
			break;
		case '-enditem':
			if (info) {
				if (!info.itemSeen && !/\[from\] move:/.test(args.join('|'))) info.itemSeen = toID(args[1]);
				info.item = '';
			}
			break;
		case '-ability':
			if (info) info.ability = toID(args[1]);
			break;
		case '-weather':
			this.weather = args[0] === 'none' ? '' : toID(args[0]);
			break;
		case '-sidestart': case '-sideend':
			if (args[0].slice(0, 2) === this.sideId) {
				const cond = toID(args[1].replace(/^move: /, ''));
				if (cmd === '-sideend') {
					this.mySide.delete(cond);
					if (cond === 'spikes') this.mySpikes = 0;
				} else {
					this.mySide.add(cond);
					if (cond === 'spikes') this.mySpikes++;
				}
			}
			break;
		}
		// "[from] item: X" / "[from] ability: X" belong to the "[of]" Pokémon when there is one, else to args[0].
		for (const arg of args) {
			const m = /^\[from\] (item|ability): (.*)$/.exec(arg);
			if (!m) continue;
			const of = args.find(a => a.startsWith('[of] '));
			const holder = of ? parseIdent(of.slice(5)) : who;
			const hinfo = holder.side === this.foeSideId ? this.foeInfo[holder.name] : null;
			if (!hinfo) continue;
			if (m[1] === 'item') {
				if (!hinfo.itemSeen) hinfo.itemSeen = toID(m[2]);
				if (cmd !== '-enditem') hinfo.item = toID(m[2]);
			} else {
				hinfo.ability = toID(m[2]);
			}
		}
	}

	// -- the foe's hidden set ------------------------------------------------

	/** The most likely set of a foe consistent with what it revealed, and its moves' likelihoods. */
	guessSet(name) {
		const info = this.foeInfo[name];
		const seen = this.foeMoves[name] ? [...this.foeMoves[name]].map(moveKey) : [];
		const sets = drawnSets(this.generatorFormat, info.species);
		const fits = ({ set }) => {
			if (!seen.every(m => set.moves.includes(m) || (m === 'hiddenpower' && set.moves.some(x => /^hiddenpower/.test(x))))) {
				return false;
			}
			if (info.itemSeen && toID(set.item) !== info.itemSeen) return false;
			if (info.ability && this.gen >= 3 && toID(set.ability) !== info.ability) return false;
			if (info.tera && set.teraType && set.teraType !== info.tera) return false;
			return true;
		};
		let pool = sets.filter(fits);
		if (!pool.length) pool = sets.filter(({ set }) => seen.every(m => set.moves.includes(m)));
		if (!pool.length) pool = sets;
		const total = pool.reduce((n, s) => n + s.count, 0);
		const moveLikelihood = {};
		for (const { set, count } of pool) for (const m of set.moves) moveLikelihood[m] = (moveLikelihood[m] || 0) + count / total;
		for (const m of seen) moveLikelihood[m] = 1;
		const species = this.dex.species.get(info.species);
		const base = pool.length ? pool[0].set : null;
		const set = {
			name, species: species.name, level: info.level,
			moves: base ? base.moves.slice() : seen.slice(0, 4),
			item: info.item !== undefined ? info.item : (base ? toID(base.item) : ''),
			ability: info.ability || (base ? toID(base.ability) : toID(Object.values(species.abilities)[0] || '')),
			evs: base ? base.evs : (this.gen <= 2 ? { hp: 255, atk: 255, def: 255, spa: 255, spd: 255, spe: 255 } :
				{ hp: 84, atk: 84, def: 84, spa: 84, spd: 84, spe: 84 }),
			ivs: base ? base.ivs : (this.gen <= 2 ? { hp: 30, atk: 30, def: 30, spa: 30, spd: 30, spe: 30 } :
				{ hp: 31, atk: 31, def: 31, spa: 31, spd: 31, spe: 31 }),
			teraType: info.tera || (base && base.teraType) || species.types[0],
		};
		if (!set.moves.length) set.moves = ['tackle'];
		return { set, moveLikelihood };
	}

	// -- the hypothetical battle ---------------------------------------------

	/** Own sets from the request: the engine gets the exact stats written onto its Pokémon afterwards. */
	ownSets(side) {
		return side.pokemon.map(mon => {
			const { species, level } = parseDetails(mon.details);
			return {
				name: mon.ident.slice(4), species, level, moves: mon.moves.map(moveKey), item: mon.item || '',
				ability: mon.baseAbility || mon.ability || '', teraType: mon.teraType || undefined,
				evs: this.gen <= 2 ? { hp: 255, atk: 255, def: 255, spa: 255, spd: 255, spe: 255 } :
					{ hp: 84, atk: 84, def: 84, spa: 84, spd: 84, spe: 84 },
			};
		});
	}

	/** The hypothetical battle for these sets, rebuilt only when one of them changed. */
	simFor(mySets, foeSets) {
		const key = JSON.stringify([mySets, foeSets]);
		if (this.sim && this.sim.key === key) return this.sim;
		const battle = new Battle({ formatid: this.format, seed: [1, 2, 3, 4] });
		battle.setPlayer('p1', { name: 'me', team: mySets });
		battle.setPlayer('p2', { name: 'foe', team: foeSets });
		// The mean roll, no crits: expected damage instead of a sample. Gen 3+ roll through `randomizer`; gens 1-2
		// call `random(217, 256)` and gen 1 rolls its crits with `randomChance` even for willCrit: false moves
		// (mods/gen1/scripts.js getDamage), so those answer their mean and "no" (crits come in as critFactor).
		battle.randomizer = damage => battle.trunc(damage * MEAN_ROLL);
		battle.random = (m, n) => (m === undefined ? 0.5 : n === undefined ? Math.floor((m - 1) / 2) : Math.floor((m + n - 1) / 2));
		battle.randomChance = () => false;
		const mine = {};
		battle.p1.pokemon.forEach((p, i) => { mine[mySets[i].name] = p; });
		const foes = {};
		battle.p2.pokemon.forEach((p, i) => { foes[foeSets[i].name] = p; });
		this.sim = { key, battle, mine, foes };
		return this.sim;
	}

	/** Writes what we know now (HP, status, boosts, stats, Tera) onto the hypothetical battle's Pokémon. */
	syncState(request, sim, foeName) {
		const { battle } = sim;
		battle.field.weather = this.weather && battle.dex.conditions.get(this.weather).exists ? this.weather : '';
		battle.field.weatherState = { id: battle.field.weather };
		for (const mon of request.side.pokemon) {
			const p = sim.mine[mon.ident.slice(4)];
			const m = /^(\d+)\/(\d+)/.exec(mon.condition);
			if (m) {
				p.maxhp = p.baseMaxhp = Number(m[2]);
				p.hp = Number(m[1]);
			} else {
				p.hp = 0;
			}
			Object.assign(p.storedStats, mon.stats);
			Object.assign(p.baseStoredStats, mon.stats);
			p.status = statusOf(mon.condition);
			p.statusState = { id: p.status, target: p };
			this.setBoosts(p, mon.active ? this.myBoosts : {});
			p.terastallized = mon.terastallized || undefined;
		}
		for (const [name, info] of Object.entries(this.foeInfo)) {
			const p = sim.foes[name];
			if (!p) continue;
			p.hp = info.hp > 0 ? Math.max(1, Math.round(info.hp * p.maxhp)) : 0;
			p.status = info.status || '';
			p.statusState = { id: p.status, target: p };
			this.setBoosts(p, name === foeName && this.foe ? this.foe.boosts : {});
			p.terastallized = info.tera || undefined;
		}
	}

	/**
	 * Boost stages onto a hypothetical Pokémon. Gen 1's engine reads `modifiedStats` (boosts, and the paralysis and
	 * burn drops, baked into the stat; gen1/scripts.js `getStat`), so those are recomputed from the stored stats
	 * the way its `boostBy` does.
	 */
	setBoosts(p, boosts) {
		p.boosts = { atk: 0, def: 0, spa: 0, spd: 0, spe: 0, accuracy: 0, evasion: 0 };
		for (const [stat, stage] of Object.entries(boosts)) if (stat in p.boosts) p.boosts[stat] = Math.max(-6, Math.min(6, stage));
		if (!p.modifiedStats) return;
		for (const stat of ['atk', 'def', 'spa', 'spd', 'spe']) {
			const stage = p.boosts[stat];
			const factor = stage >= 0 ? [1, 1.5, 2, 2.5, 3, 3.5, 4][stage] : [100, 66, 50, 40, 33, 28, 25][-stage] / 100;
			p.modifiedStats[stat] = Math.max(1, Math.min(999, Math.floor(p.storedStats[stat] * factor)));
		}
		if (p.status === 'par') p.modifiedStats.spe = Math.max(1, Math.floor(p.modifiedStats.spe / 4));
		if (p.status === 'brn') p.modifiedStats.atk = Math.max(1, Math.floor(p.modifiedStats.atk / 2));
	}

	/** Puts `mine` and `foe` on the field of the hypothetical battle (abilities and items only act when active). */
	place(sim, mine, foe) {
		const { battle } = sim;
		for (const p of battle.p1.pokemon) p.isActive = p === mine;
		for (const p of battle.p2.pokemon) p.isActive = p === foe;
		battle.p1.active[0] = mine;
		battle.p2.active[0] = foe;
	}

	/**
	 * Expected HP a move takes off `target` per use, from the engine's damage formula: mean roll, no crit,
	 * times accuracy and expected hits. 0 for status moves and immunities.
	 */
	engineDamage(sim, source, target, moveId, onHit = false) {
		const { battle } = sim;
		const dexMove = battle.dex.moves.get(moveId);
		if (!dexMove.exists || dexMove.category === 'Status') return 0;
		if (dexMove.damageCallback && !PLAIN_CALLBACKS.has(dexMove.id)) return 0.1 * target.maxhp;
		if (HISTORY_CALLBACKS.has(dexMove.id)) return 0.1 * target.maxhp; // depends on the damage taken this turn
		if (dexMove.id === 'dreameater' && target.status !== 'slp') return 0;
		if (dexMove.id === 'synchronoise' && !target.hasType(source.getTypes())) return 0;
		this.place(sim, source, target);
		const move = battle.dex.getActiveMove(dexMove.id);
		if (!dexMove.willCrit) move.willCrit = false;
		let damage;
		try {
			damage = battle.actions.getDamage(source, target, move, true);
		} catch (err) {
			// A base-power callback that reads what only running the move sets up (Beat Up's `move.allies`: a
			// TypeError in the engine's data/moves.js, seen 7 times in 200 gen9randombattle battles): the move's
			// listed base power instead, without the callback.
			if (!(err instanceof TypeError)) throw err;
			const plain = battle.dex.getActiveMove(dexMove.id);
			plain.basePowerCallback = undefined;
			plain.basePower = dexMove.basePower || 60;
			if (!dexMove.willCrit) plain.willCrit = false;
			damage = battle.actions.getDamage(source, target, plain, true);
		}
		if (!damage) return 0;
		let hits = 1;
		if (dexMove.multihit) {
			if (Array.isArray(dexMove.multihit)) {
				hits = source.hasAbility('skilllink') ? dexMove.multihit[1] :
					(dexMove.multihit[1] === 5 ? (source.hasItem('loadeddice') ? 4.5 : (this.gen >= 5 ? 3.1 : 3)) :
						(dexMove.multihit[0] + dexMove.multihit[1]) / 2);
			} else {
				hits = dexMove.multihit;
			}
		}
		let accuracy = onHit ? 1 : this.hitChance(dexMove);
		if (dexMove.flags.charge && dexMove.id !== 'solarbeam' && dexMove.id !== 'solarblade') accuracy *= 0.5;
		if ((dexMove.id === 'solarbeam' || dexMove.id === 'solarblade') && !['sunnyday', 'desolateland'].includes(this.weather)) {
			accuracy *= 0.5;
		}
		if (dexMove.id === 'focuspunch') accuracy *= 0.3;
		return damage * hits * accuracy * this.critFactor(source, dexMove);
	}

	/** The chance a move hits (gen 1 misses 1/256 of 100 % moves); accuracy and evasion stages are left out. */
	hitChance(move) {
		if (move.accuracy === true) return 1;
		return this.gen === 1 && move.accuracy === 100 ? 255 / 256 : move.accuracy / 100;
	}

	/**
	 * A move's damage as a rate per turn in a damage race: Explosion ends the user's race (left out), a move that
	 * needs a recharge turn counts half unless it finishes the target.
	 */
	static raceRate(move, dmg, targetHp) {
		if (move.selfdestruct) return 0;
		if (move.self && move.self.volatileStatus === 'mustrecharge' && dmg < targetHp) return dmg / 2;
		return dmg;
	}

	// -- the one-turn lookahead ---------------------------------------------

	/**
	 * Who wins the damage race between two actives from here, in HP fractions: the HP the loser is still expected
	 * to take minus the HP the winner loses on the way (positive: we win). d*: expected damage per turn as a
	 * fraction of the target's max HP; h*: HP fractions left.
	 */
	static race(hMe, hFoe, dMe, dFoe, meFirst, lostMe = 0, lostFoe = 0) {
		const nMe = dMe > 1e-6 ? Math.ceil(hFoe / dMe - 1e-9) + lostMe : Infinity;
		const nFoe = dFoe > 1e-6 ? Math.ceil(hMe / dFoe - 1e-9) + lostFoe : Infinity;
		if (nMe === Infinity && nFoe === Infinity) return 0;
		const weWin = meFirst ? nMe <= nFoe : nMe < nFoe;
		if (weWin) return hFoe - Math.min(hMe, Math.max(0, (meFirst ? nMe - 1 : nMe) - lostFoe) * dFoe);
		return Math.min(hFoe, Math.max(0, (meFirst ? nFoe : nFoe - 1) - lostMe) * dMe) - hMe;
	}

	/**
	 * What a major status costs its holder: turns it will not act (sleep, freeze: guesses at the turns left, gen 1's
	 * freeze lasts until hit by fire) and the share of its other turns it acts in (paralysis: 25 % full paralysis).
	 */
	statusCost(status, fresh = false) {
		if (status === 'slp' && fresh) return { lost: this.gen <= 2 ? 4 : 2, rate: 1, now: 0 };
		if (status === 'slp') return { lost: this.gen <= 2 ? 2.5 : 1.5, rate: 1, now: this.gen <= 2 ? 0 : 0.33 };
		if (status === 'frz') return { lost: this.gen === 1 ? 8 : 3, rate: 1, now: this.gen === 1 ? 0 : 0.2 };
		if (status === 'par') return { lost: 0, rate: 0.75, now: 0.75 };
		return { lost: 0, rate: 1, now: 1 };
	}

	/**
	 * Expected damage factor of critical hits: gen 1's rate follows base Speed (x8 for high-crit moves) and a crit
	 * about doubles the damage; later gens use the stage tables of sim/battle-actions.ts (x2 to gen 5, x1.5 after).
	 */
	critFactor(source, move) {
		if (move.willCrit) return 1;
		const stage = (move.critRatio || 1);
		if (this.gen === 1) {
			const chance = Math.min(255, Math.floor(source.species.baseStats.spe / 2) * (stage > 1 ? 8 : 1)) / 256;
			return 1 + chance * 0.9;
		}
		const table = this.gen >= 7 ? [0, 1 / 24, 1 / 8, 1 / 2, 1] : [0, 1 / 16, 1 / 8, 1 / 4, 1 / 3, 1 / 2];
		const chance = table[Math.min(stage, table.length - 1)];
		return 1 + chance * (this.gen >= 6 ? 0.5 : 1);
	}

	choose(request, legal) {
		if (request.teamPreview || legal.length === 1) return legal[0].choice;
		// No foe on the field to search against, or Revival Blessing (a forced "switch" to a fainted Pokémon):
		// HeuristicPlayer's choice.
		const reviving = request.forceSwitch && request.side.pokemon[0] && request.side.pokemon[0].reviving;
		if (reviving || !this.foe || this.foe.hp <= 0 || !this.foeInfo[this.foe.name]) return super.choose(request, legal);
		// Wall time and this process's CPU time: on a shared machine the wall time also counts other processes.
		const started = process.hrtime.bigint();
		const cpu = process.cpuUsage();
		const choice = this.search(request, legal);
		const used = process.cpuUsage(cpu);
		TIMING.decisions++;
		TIMING.ms += Number(process.hrtime.bigint() - started) / 1e6;
		TIMING.cpuMs += (used.user + used.system) / 1e3;
		return choice;
	}

	search(request, legal) {
		const side = request.side;
		const foeName = this.foe.name;
		// Every foe seen so far goes into the hypothetical battle (the active one first).
		const guesses = {};
		const foeNames = [foeName, ...Object.keys(this.foeInfo).filter(n => n !== foeName)];
		for (const name of foeNames) guesses[name] = this.guessSet(name);
		const sim = this.simFor(this.ownSets(side), foeNames.map(n => guesses[n].set));
		this.syncState(request, sim, foeName);
		const F = sim.foes[foeName];
		const likelihood = guesses[foeName].moveLikelihood;
		const foeMoves = Object.keys(likelihood).sort((a, b) => likelihood[b] - likelihood[a] || (a < b ? -1 : 1))
			.slice(0, 6);

		const mons = side.pokemon.map(mon => ({ mon, p: sim.mine[mon.ident.slice(4)] }));
		const activeEntry = mons.find(e => e.mon.active) || mons[0];
		const A = activeEntry.p;
		const hpFrac = p => p.hp / p.maxhp;
		const foeHp = F.hp / F.maxhp;
		const foeStatus = this.statusCost(F.status);
		const foeRate = foeStatus.rate;

		// The foe's moves against one of ours: expected damage fraction and the move's priority.
		const foeAgainst = (p, tera) => {
			const saved = p.terastallized;
			if (tera) p.terastallized = p.teraType;
			const out = foeMoves.map(id => {
				const move = this.dex.moves.get(id);
				const onHit = this.engineDamage(sim, F, p, id, true) / p.maxhp;
				const acc = move.category === 'Status' ? 1 : this.hitChance(move);
				const dmg = onHit * acc;
				return { id, p: likelihood[id], dmg, onHit, acc, rate: SearchPlayer.raceRate(move, dmg, p.hp / p.maxhp),
					priority: move.priority || 0, selfdestruct: !!move.selfdestruct };
			});
			p.terastallized = saved;
			return out;
		};
		// The foe's likely best hit on `p` per turn, counting unlikely moves by their likelihood.
		const foeBest = replies => foeRate * Math.max(0, ...replies.map(r => r.rate * Math.min(1, r.p / LIKELY_MOVE)));
		// Our best hit on the foe per turn.
		const ownBest = (p, tera) => {
			const saved = p.terastallized;
			if (tera) p.terastallized = p.teraType;
			let best = 0;
			for (const slot of p.moveSlots) {
				const dmg = this.engineDamage(sim, p, F, slot.id) / F.maxhp;
				best = Math.max(best, SearchPlayer.raceRate(this.dex.moves.get(slot.id), dmg, F.hp / F.maxhp));
			}
			p.terastallized = saved;
			return best * this.statusCost(p.status).rate;
		};
		this.place(sim, A, F);
		const fasterThanFoe = p => {
			this.place(sim, p, F);
			const mine = p.getActionSpeed();
			const theirs = F.getActionSpeed();
			return mine === theirs ? 0.5 : (mine > theirs ? 1 : 0);
		};

		// Every choice is scored by the change it makes: HP fractions lost and taken this turn plus the race after it
		// (the HP on benched Pokémon is the same whatever we choose, so it drops out).

		// The best race one of our benched Pokémon could run if it came in for free (after our active faints).
		const bench = mons.filter(e => !e.mon.active && !isFainted(e.mon));
		const benchRace = new Map();
		for (const e of bench) {
			const replies = foeAgainst(e.p, false);
			const speed = fasterThanFoe(e.p);
			const dMe = ownBest(e.p, false);
			benchRace.set(e, { replies, speed, dMe });
		}
		const raceOf = (hMe, hFoe, dMe, dFoe, speed, p, lostFoe = foeStatus.lost) => {
			const lostMe = this.statusCost(p.status).lost;
			const run = first => SearchPlayer.race(hMe, hFoe, dMe, dFoe, first, lostMe, lostFoe);
			return speed === 0.5 ? (run(true) + run(false)) / 2 : run(speed === 1);
		};
		const freeSwitchValue = hFoe => {
			let best = -1;
			for (const e of bench) {
				const r = benchRace.get(e);
				best = Math.max(best, raceOf(hpFrac(e.p) - this.hazardCost(e.p), hFoe, r.dMe, foeBest(r.replies), r.speed, e.p));
			}
			return best;
		};

		// The foe's reply distribution, fixed by what it can see: our current active.
		const activeReplies = foeAgainst(A, false);
		const weights = this.foeModel(activeReplies);

		const act = request.active && request.active[0];
		const results = [];
		const plainThreat = foeBest(activeReplies);
		const heuristicMe = this.ownMon(activeEntry.mon, this.myBoosts);
		const heuristicFoe = this.foeMon();
		const teraCache = {};
		for (const c of legal) {
			let value;
			if (c.kind === 'switch') {
				const e = mons[c.index - 1];
				const r = benchRace.get(e);
				const enter = hpFrac(e.p) - this.hazardCost(e.p);
				value = 0;
				activeReplies.forEach((reply, i) => {
					const taken = r.replies[i].dmg * foeStatus.now;
					const hMe = enter - taken;
					let v = -(hpFrac(e.p) - Math.max(0, hMe)); // material lost on the way in
					v += hMe > 0 ? RACE_WEIGHT * raceOf(hMe, foeHp, r.dMe, foeBest(r.replies), r.speed, e.p) :
						RACE_WEIGHT * freeSwitchValue(foeHp);
					value += weights[i] * v;
				});
				value -= SWITCH_COST;
			} else if (c.kind === 'move' && act && act.moves[c.index - 1]) {
				const moveId = moveKey(act.moves[c.index - 1].id);
				const tera = !!c.tera;
				if (!teraCache[tera]) {
					const replies = tera ? foeAgainst(A, true) : activeReplies;
					teraCache[tera] = { replies, dMe: ownBest(A, tera), dFoe: foeBest(replies), speed: fasterThanFoe(A) };
				}
				const t = teraCache[tera];
				const ctx = { sim, A, F, t, activeReplies, weights, raceOf, freeSwitchValue, foeAgainst, fasterThanFoe,
					ownBest, foeBest };
				const move = this.dex.moves.get(moveId);
				const status = move.exists && move.category === 'Status' && !tera;
				value = null;
				if (status && move.status) value = this.inflictOutcome(ctx, move);
				if (status && move.target === 'self' && move.boosts) value = this.setupOutcome(ctx, move);
				if (value === null) {
					value = this.moveOutcome(sim, A, F, moveId, tera, t, activeReplies, weights, raceOf, freeSwitchValue,
						heuristicMe, heuristicFoe, plainThreat);
				}
				if (tera) value -= TERA_MARGIN;
			} else {
				value = -Infinity; // gimmicks of older gens and `pass` are handled below
			}
			results.push({ c, value });
		}
		const best = this.argmax(results, r => r.value);
		if (best.value === -Infinity) return legal[0].choice;
		if (best.c.kind === 'move' && !best.c.tera) {
			return this.withGimmick(best.c, legal, heuristicMe, heuristicFoe).choice;
		}
		return best.c.choice;
	}

	/** Entry hazards' cost (HP fraction) for one of ours switching in. */
	hazardCost(p) {
		if (p.hasItem('heavydutyboots') || p.hasAbility('magicguard')) return 0;
		let cost = 0;
		if (this.mySide.has('stealthrock')) cost += Math.pow(2, this.dex.getEffectiveness('Rock', p.getTypes())) / 8;
		if (this.mySpikes && p.isGrounded()) cost += [0, 1 / 8, 1 / 6, 1 / 4][Math.min(3, this.mySpikes)];
		return cost;
	}

	/** Weights of the foe's replies: mostly its strongest likely move, the rest by likelihood. */
	foeModel(replies) {
		const total = replies.reduce((s, r) => s + r.p, 0) || 1;
		let bestIndex = 0;
		// Explosion is a last resort for the scripted players (HeuristicPlayer scores it x0.25 above 30 % HP).
		const pull = r => r.dmg * r.p * (r.selfdestruct ? 0.25 : 1);
		replies.forEach((r, i) => {
			if (pull(r) > pull(replies[bestIndex])) bestIndex = i;
		});
		return replies.map((r, i) => (1 - FOE_GREEDY) * r.p / total + (i === bestIndex ? FOE_GREEDY : 0));
	}

	/**
	 * What a damaging move's chance of a major status is worth (HeuristicPlayer's status values, times the chance).
	 * A gen-1 freeze never thaws unless hit by fire: worth most of the foe's HP.
	 */
	secondaryValue(move, F, hF) {
		if (F.status) return 0;
		let value = 0;
		for (const sec of move.secondaries || []) {
			if (!sec.status || !sec.chance) continue;
			if (!this.dex.getImmunity(sec.status, F.getTypes())) continue;
			if (sec.status === 'par' && move.type === 'Electric' && F.hasType('Electric')) continue;
			const worth = sec.status === 'frz' && this.gen === 1 ? 0.8 * hF : (STATUS_WORTH[sec.status] || 0.1) * Math.min(1, hF * 1.5);
			value += sec.chance / 100 * worth;
		}
		return value;
	}

	/**
	 * Value of a move that inflicts a major status (Sleep Powder, Thunder Wave, Will-O-Wisp, Toxic...): the turn with
	 * no damage dealt, then the race against the statused foe, whose speed and damage the engine recomputes
	 * (paralysis speed drop, burn's attack cut) and who loses turns. null when the move cannot work, so the caller
	 * falls back to the plain evaluation.
	 */
	inflictOutcome(ctx, move) {
		const { A, F, t, activeReplies, weights, raceOf, freeSwitchValue, foeAgainst, fasterThanFoe } = ctx;
		const status = move.status;
		if (F.status || F.hp <= 0 || !this.dex.getImmunity(status, F.getTypes())) return null;
		if (move.ignoreImmunity === false && !this.dex.getImmunity(move.type, F.getTypes())) return null;
		if (status === 'slp' && Object.values(this.foeStatus).includes('slp')) return null; // Sleep Clause
		if (move.flags.powder && this.gen >= 6 && F.hasType('Grass')) return null;
		if (status === 'par' && move.type === 'Electric' && F.hasType('Electric') && this.gen >= 6) return null;
		if (['tox', 'psn'].includes(status) && (F.hasType('Poison') || F.hasType('Steel'))) return null;
		const accuracy = move.accuracy === true ? 1 : move.accuracy / 100;
		const cost = this.statusCost(status, true);

		const boosts = { ...F.boosts };
		F.status = status;
		F.statusState = { id: status, target: F };
		this.setBoosts(F, boosts);
		const replies = foeAgainst(A, false);
		const speed = fasterThanFoe(A);
		F.status = '';
		F.statusState = { id: '', target: F };
		this.setBoosts(F, boosts);
		const dFoeAfter = cost.rate * Math.max(0, ...replies.map(r => r.rate * Math.min(1, r.p / LIKELY_MOVE)));
		// Poison and burn damage per turn shorten the foe's race like a hit of ours would.
		const residual = { tox: 0.125, psn: 0.125, brn: this.gen >= 7 ? 0.0625 : 0.125 }[status] || 0;

		const hA = A.hp / A.maxhp;
		const hF = F.hp / F.maxhp;
		let value = 0;
		activeReplies.forEach((reply, i) => {
			const meFirst = move.priority > reply.priority || (move.priority === reply.priority && t.speed >= 0.5);
			const actsNow = meFirst ? accuracy * cost.now + (1 - accuracy) : 1;
			const hMe = hA - reply.dmg * actsNow;
			if (hMe <= 0) {
				value += weights[i] * (-hA + RACE_WEIGHT * freeSwitchValue(hF));
				return;
			}
			const hit = raceOf(hMe, hF, t.dMe + residual, dFoeAfter, speed, A, cost.lost);
			const miss = raceOf(hMe, hF, t.dMe, t.dFoe, t.speed, A);
			value += weights[i] * (-(hA - hMe) + RACE_WEIGHT * (accuracy * hit + (1 - accuracy) * miss));
		});
		return value;
	}

	/**
	 * Value of a self-boosting move (Swords Dance, Dragon Dance, Calm Mind, gen 1's Amnesia...): the turn with no
	 * damage dealt, then the race from the boosted position, with our damage, the foe's damage and the speed order
	 * recomputed by the engine under the new stages.
	 */
	setupOutcome(ctx, move) {
		const { A, activeReplies, weights, raceOf, freeSwitchValue, foeAgainst, fasterThanFoe, ownBest, foeBest } = ctx;
		const before = { ...A.boosts };
		const after = { ...before };
		let gain = false;
		for (const [stat, n] of Object.entries(move.boosts)) {
			if (!(stat in after)) continue;
			if (n > 0 && after[stat] < 6) gain = true;
			after[stat] = Math.max(-6, Math.min(6, after[stat] + n));
		}
		if (!gain) return -0.5; // nothing left to gain: a wasted turn
		this.setBoosts(A, after);
		const dMe = ownBest(A, false);
		const dFoe = foeBest(foeAgainst(A, false));
		const speed = fasterThanFoe(A);
		this.setBoosts(A, before);
		const hA = A.hp / A.maxhp;
		const hF = ctx.F.hp / ctx.F.maxhp;
		let value = 0;
		activeReplies.forEach((reply, i) => {
			const hMe = hA - reply.dmg;
			const v = hMe <= 0 ? -hA + RACE_WEIGHT * freeSwitchValue(hF) :
				-(hA - hMe) + RACE_WEIGHT * raceOf(hMe, hF, dMe, dFoe, speed, A);
			value += weights[i] * v;
		});
		return value;
	}

	/** Expected value of using `moveId` this turn (closed-form turn against each foe reply, then the race). */
	moveOutcome(sim, A, F, moveId, tera, t, activeReplies, weights, raceOf, freeSwitchValue, hMe, hFoe, threat) {
		const move = this.dex.moves.get(moveId);
		const hA = A.hp / A.maxhp;
		const hF = F.hp / F.maxhp;
		let dmg = 0;
		let acc = 1;
		let bonus = 0;
		if (!move.exists || ['recharge', 'fight', 'struggle'].includes(moveId)) {
			dmg = moveId === 'struggle' ? this.engineDamage(sim, A, F, 'struggle') / F.maxhp : 0;
		} else if (move.category === 'Status') {
			bonus = this.moveValue(hMe, hFoe, moveId, tera, threat);
		} else {
			const saved = A.terastallized;
			if (tera) A.terastallized = A.teraType;
			dmg = this.engineDamage(sim, A, F, moveId, true) / F.maxhp;
			acc = this.hitChance(move);
			A.terastallized = saved;
			if ((moveId === 'fakeout' || moveId === 'firstimpression') && this.turn !== this.mySwitchInTurn + 1) dmg = 0;
			if (dmg > 0 && dmg < hF) bonus = acc * this.secondaryValue(move, F, hF);
		}
		const priority = move.exists ? move.priority || 0 : 0;
		const recoil = move.recoil ? move.recoil[0] / move.recoil[1] : 0;
		const drain = move.drain ? move.drain[0] / move.drain[1] : 0;
		const recharge = move.self && move.self.volatileStatus === 'mustrecharge';
		// A sleeping, frozen or paralysed side may not act this turn.
		dmg *= this.statusCost(A.status).now;
		const foeNow = this.statusCost(F.status).now;
		// Hits and misses are separate outcomes (not an expected damage): a sure KO and a likely one differ.
		const mine = acc < 1 ? [[acc, dmg], [1 - acc, 0]] : [[1, dmg]];
		let value = 0;
		activeReplies.forEach((reply, i) => {
			const r = tera ? t.replies[i] : reply;
			const theirs = r.acc < 1 ? [[r.acc, r.onHit * foeNow], [1 - r.acc, 0]] : [[1, r.onHit * foeNow]];
			const orders = reply.priority !== priority ? [priority > reply.priority ? 1 : 0] :
				(t.speed === 0.5 ? [1, 0] : [t.speed]);
			let v = 0;
			for (const [pMine, dealtOnHit] of mine) for (const [pTheirs, taken] of theirs) for (const meFirst of orders) {
				const dmg = dealtOnHit;
				let hMeNow = hA;
				let hFoeNow = hF;
				const hit = () => {
					const dealt = Math.min(hFoeNow, dmg);
					hFoeNow -= dealt;
					hMeNow = Math.min(1, hMeNow + dealt * drain * F.maxhp / A.maxhp - dealt * recoil * F.maxhp / A.maxhp);
					if (move.selfdestruct) hMeNow = 0;
				};
				if (meFirst) {
					hit();
					if (hFoeNow > 1e-9 && hMeNow > 0) hMeNow -= taken;
				} else {
					hMeNow -= taken;
					if (hMeNow > 0) hit();
				}
				hMeNow = Math.max(0, hMeNow);
				hFoeNow = Math.max(0, hFoeNow);
				let u = (hF - hFoeNow) - (hA - hMeNow);
				if (hFoeNow <= 1e-9) {
					u += 0.1; // the KO itself: the foe's next Pokémon comes in with no free hit on us
				} else if (hMeNow <= 0) {
					u += RACE_WEIGHT * freeSwitchValue(hFoeNow);
				} else {
					let dFoe = t.dFoe;
					if (recharge && hFoeNow > 1e-9) hMeNow = Math.max(0, hMeNow - dFoe); // a free hit while we recharge
					u += RACE_WEIGHT * raceOf(hMeNow, hFoeNow, t.dMe, dFoe, t.speed, A);
				}
				v += pMine * pTheirs * u / orders.length;
			}
			value += weights[i] * v;
		});
		return value + bonus;
	}
}

module.exports = { SearchPlayer, drawnSets };
