'use strict';
/**
 * Scripted players for generate_battles.js.
 *
 * A player sees only what a real client would: the `|request|` JSON of its own
 * side and the log lines of its own player stream (own HP exact, foe HP as a
 * fraction). All randomness comes from the PRNG handed in, so a player is a
 * pure function of (seed, what it has seen).
 */

const { Dex, toID } = require('pokemon-showdown');

// ---------------------------------------------------------------------------
// Request helpers shared by all players
// ---------------------------------------------------------------------------

function isFainted(mon) {
	return mon.condition.endsWith(' fnt') || mon.condition.startsWith('0 ') || mon.condition === '0';
}

/** "123/456 par" -> 0.27; "0 fnt" -> 0 */
function hpFraction(condition) {
	const m = /^(\d+)(?:\/(\d+))?/.exec(condition || '');
	if (!m) return 0;
	if (!m[2]) return Number(m[1]) > 0 ? 1 : 0;
	return Number(m[1]) / Number(m[2]);
}

function statusOf(condition) {
	const parts = (condition || '').split(' ');
	return parts.length > 1 && parts[1] !== 'fnt' ? parts[1] : '';
}

/**
 * Every choice string the simulator will accept for this request, in a
 * canonical order (moves first, then switches). Singles only.
 *
 * Returns [] for `wait` requests. Each entry: {choice, kind, index, tera}.
 */
function legalChoices(request) {
	if (!request || request.wait) return [];
	const side = request.side;
	if (request.teamPreview) {
		const size = side.pokemon.length;
		let order = '';
		for (let i = 1; i <= size; i++) order += i;
		return [{ choice: `team ${order}`, kind: 'team', index: 0, tera: false }];
	}
	const switches = [];
	const active = side.pokemon[0];
	if (request.forceSwitch) {
		// Revival Blessing asks for a *fainted* party member instead.
		const reviving = !!(active && active.reviving);
		side.pokemon.forEach((mon, i) => {
			if (mon.active) return;
			if (reviving ? isFainted(mon) : !isFainted(mon)) {
				switches.push({ choice: `switch ${i + 1}`, kind: 'switch', index: i + 1, tera: false });
			}
		});
		if (!switches.length) return [{ choice: 'pass', kind: 'pass', index: 0, tera: false }];
		return switches;
	}
	const act = request.active && request.active[0];
	if (!act) return [{ choice: 'pass', kind: 'pass', index: 0, tera: false }];
	const moves = [];
	const teras = [];
	const gimmicks = [];
	act.moves.forEach((move, i) => {
		// Locked moves / Recharge / Struggle / gen-1 "Fight" come without pp or
		// disabled fields and are always selectable.
		if (move.disabled) return;
		if (typeof move.pp === 'number' && move.pp <= 0 && act.moves.length > 1) return;
		moves.push({ choice: `move ${i + 1}`, kind: 'move', index: i + 1, tera: false, id: move.id });
		if (['struggle', 'recharge', 'fight'].includes(move.id)) return;
		if (act.canTerastallize) {
			teras.push({ choice: `move ${i + 1} terastallize`, kind: 'move', index: i + 1, tera: true, id: move.id });
		}
		// Gens 6-8: the same move slot used with Mega Evolution / Ultra Burst, as a Z-move (only the moves the
		// request pairs with the held crystal), or Dynamaxing (the slot becomes its Max move).
		const variants = [];
		if (act.canMegaEvo) variants.push('mega');
		if (act.canUltraBurst) variants.push('ultra');
		if (act.canZMove && act.canZMove[i]) variants.push('zmove');
		if (act.canDynamax) variants.push('dynamax');
		for (const gimmick of variants) {
			gimmicks.push({ choice: `move ${i + 1} ${gimmick}`, kind: 'move', index: i + 1, tera: false, gimmick,
				id: move.id });
		}
	});
	if (!moves.length) {
		// Should not happen (the simulator offers Struggle), but never hand back nothing.
		moves.push({ choice: 'move 1', kind: 'move', index: 1, tera: false, id: act.moves[0] && act.moves[0].id });
	}
	// maybeTrapped means "may be trapped by a hidden ability": switching would be
	// rejected with [Unavailable choice] half the time, so treat it as trapped.
	if (!act.trapped && !act.maybeTrapped) {
		side.pokemon.forEach((mon, i) => {
			if (mon.active || isFainted(mon)) return;
			switches.push({ choice: `switch ${i + 1}`, kind: 'switch', index: i + 1, tera: false });
		});
	}
	return moves.concat(teras, gimmicks, switches);
}

// ---------------------------------------------------------------------------
// Random player
// ---------------------------------------------------------------------------

class RandomPlayer {
	/** @param {object} opts {prng, format, side} */
	constructor(opts) {
		this.prng = opts.prng;
		this.teraChance = 0.1;
		this.gimmickChance = 0.2; // Mega Evolution, a Z-move or Dynamax on a move, when the request offers one
	}

	observe(_lines) {}

	choose(request, legal) {
		if (request.teamPreview) {
			// A seeded permutation, so leads vary.
			const n = request.side.pokemon.length;
			const order = [];
			for (let i = 1; i <= n; i++) order.push(i);
			this.prng.shuffle(order);
			return `team ${order.join('')}`;
		}
		// Uniform over moves + switches; terastallizing is a coin flip layered on
		// top of a move choice rather than a separate option, so it stays rare.
		const base = legal.filter(c => !c.tera && !c.gimmick);
		const pick = this.prng.sample(base);
		if (pick.kind === 'move') {
			const tera = legal.find(c => c.tera && c.index === pick.index);
			if (tera && this.prng.random() < this.teraChance) return tera.choice;
			const variants = legal.filter(c => c.gimmick && c.index === pick.index);
			if (variants.length && this.prng.random() < this.gimmickChance) return this.prng.sample(variants).choice;
		}
		return pick.choice;
	}
}

// ---------------------------------------------------------------------------
// Heuristic player
// ---------------------------------------------------------------------------

// Abilities that make the holder immune to (or absorb) a move type.
const IMMUNITY_ABILITIES = {
	levitate: 'Ground', eartheater: 'Ground',
	flashfire: 'Fire', wellbakedbody: 'Fire',
	waterabsorb: 'Water', stormdrain: 'Water', dryskin: 'Water',
	voltabsorb: 'Electric', lightningrod: 'Electric', motordrive: 'Electric',
	sapsipper: 'Grass',
};

const SETUP_STATS = ['atk', 'spa', 'spe'];
/** "mod|type|physical" -> stand-in move id; shared by all players of a process. */
const PROBE_CACHE = {};
const HAZARDS = ['stealthrock', 'spikes', 'toxicspikes', 'stickyweb'];
const STATUS_VALUE = { slp: 0.45, par: 0.3, tox: 0.3, brn: 0.3, psn: 0.15, frz: 0.45 };
const HEAL_MOVES = {
	recover: 0.5, softboiled: 0.5, milkdrink: 0.5, slackoff: 0.5, roost: 0.5, healorder: 0.5,
	synthesis: 0.5, moonlight: 0.5, morningsun: 0.5, shoreup: 0.5, strengthsap: 0.4,
	junglehealing: 0.25, lifedew: 0.25, wish: 0.5, rest: 1,
};

function parseIdent(ident) {
	// "p2a: Regidrago" -> {side: 'p2', name: 'Regidrago'}
	const m = /^(p\d)[a-z]?: (.*)$/.exec(ident || '');
	return m ? { side: m[1], name: m[2] } : { side: '', name: ident || '' };
}

function parseDetails(details) {
	// "Regidrago, L77, F, shiny" -> {species: 'Regidrago', level: 77}
	const parts = details.split(', ');
	let level = 100;
	for (const p of parts.slice(1)) if (/^L\d+$/.test(p)) level = Number(p.slice(1));
	return { species: parts[0], level };
}

function boostMultiplier(stage) {
	stage = Math.max(-6, Math.min(6, stage || 0));
	return stage >= 0 ? (2 + stage) / 2 : 2 / (2 - stage);
}

class HeuristicPlayer {
	/** @param {object} opts {prng, format, side} */
	constructor(opts) {
		this.prng = opts.prng;
		this.dex = Dex.forFormat(opts.format);
		this.gen = this.dex.gen;
		this.sideId = opts.side;
		this.turn = 0;
		this.mySwitchInTurn = 0;
		this.myBoosts = {};
		this.foe = null; // {name, species, level, hp, status, types, boosts}
		this.foeStatus = {}; // name -> status, for the Sleep Clause check
		this.foeMoves = {}; // name -> Set of move ids seen
		this.foeSideConditions = new Set(); // hazards we have already set
		this.foeLeechSeeded = false;
		this.foeFainted = 0;
		this.foeTeamSize = 6;
	}

	// -- log tracking -------------------------------------------------------

	observe(lines) {
		for (const line of lines) {
			if (!line.startsWith('|')) continue;
			const parts = line.slice(1).split('|');
			this.observeLine(parts[0], parts.slice(1));
		}
	}

	observeLine(cmd, args) {
		const who = parseIdent(args[0]);
		const mine = who.side === this.sideId;
		switch (cmd) {
		case 'turn':
			this.turn = Number(args[0]);
			break;
		case 'teamsize':
			if (args[0] !== this.sideId) this.foeTeamSize = Number(args[1]);
			break;
		case 'switch': case 'drag': case 'replace': {
			const { species, level } = parseDetails(args[1]);
			if (mine) {
				if (cmd !== 'replace') {
					this.myBoosts = {};
					this.mySwitchInTurn = this.turn;
				}
				break;
			}
			const prevHp = cmd === 'replace' && this.foe ? this.foe.hp : 1;
			this.foe = {
				name: who.name, species, level,
				hp: args[2] ? hpFraction(args[2]) : prevHp,
				status: args[2] ? statusOf(args[2]) : '',
				types: this.dex.species.get(species).types.slice(),
				boosts: {},
			};
			this.foeLeechSeeded = false;
			if (this.foe.status) this.foeStatus[who.name] = this.foe.status;
			break;
		}
		case 'detailschange': case '-formechange':
			if (!mine && this.foe && this.foe.name === who.name) {
				const species = parseDetails(args[1]).species;
				this.foe.species = species;
				if (!this.foe.tera) this.foe.types = this.dex.species.get(species).types.slice();
			}
			break;
		case '-damage': case '-heal': case '-sethp':
			if (!mine && this.foe && this.foe.name === who.name) {
				this.foe.hp = hpFraction(args[1]);
			}
			break;
		case '-status':
			if (!mine) {
				this.foeStatus[who.name] = args[1];
				if (this.foe && this.foe.name === who.name) this.foe.status = args[1];
			}
			break;
		case '-curestatus':
			if (!mine) {
				delete this.foeStatus[who.name];
				if (this.foe && this.foe.name === who.name) this.foe.status = '';
			}
			break;
		case '-cureteam':
			if (!mine) {
				this.foeStatus = {};
				if (this.foe) this.foe.status = '';
			}
			break;
		case 'faint':
			if (!mine) {
				this.foeFainted++;
				delete this.foeStatus[who.name];
				if (this.foe && this.foe.name === who.name) this.foe.hp = 0;
			}
			break;
		case '-terastallize':
			if (!mine && this.foe && args[1] !== 'Stellar') {
				this.foe.types = [args[1]];
				this.foe.tera = true;
			}
			break;
		case '-start':
			if (!mine && this.foe && args[1] === 'typechange') {
				this.foe.types = args[2].split('/');
			} else if (!mine && /Leech Seed/.test(args[1])) {
				this.foeLeechSeeded = true;
			}
			break;
		case '-boost': case '-unboost': {
			const delta = Number(args[2]) * (cmd === '-boost' ? 1 : -1);
			const boosts = mine ? this.myBoosts : (this.foe ? this.foe.boosts : {});
			boosts[args[1]] = (boosts[args[1]] || 0) + delta;
			break;
		}
		case '-setboost': {
			const boosts = mine ? this.myBoosts : (this.foe ? this.foe.boosts : {});
			boosts[args[1]] = Number(args[2]);
			break;
		}
		case '-clearboost': case '-clearallboost':
			if (cmd === '-clearallboost' || mine) this.myBoosts = {};
			if ((cmd === '-clearallboost' || !mine) && this.foe) this.foe.boosts = {};
			break;
		case '-sidestart': case '-sideend': {
			const side = args[0].slice(0, 2);
			const cond = toID(args[1].replace(/^move: /, ''));
			if (side !== this.sideId && HAZARDS.includes(cond)) {
				if (cmd === '-sidestart') this.foeSideConditions.add(cond);
				else this.foeSideConditions.delete(cond);
			}
			break;
		}
		case 'move':
			if (!mine) {
				if (!this.foeMoves[who.name]) this.foeMoves[who.name] = new Set();
				this.foeMoves[who.name].add(toID(args[1]));
			}
			break;
		}
	}

	// -- estimates ----------------------------------------------------------

	/** Stat estimate for a foe: random-battle style spreads (what both random and our OU teams use). */
	estimateStat(base, level, isHP) {
		const bonus = this.gen <= 2 ? 93 : 52; // gen1-2: DV15 + max stat exp; later: IV31 + 84 EVs
		const core = Math.floor((2 * base + bonus) * level / 100);
		return isHP ? core + level + 10 : core + 5;
	}

	/** A uniform view of either one of our own Pokémon (from the request) or the foe (estimated). */
	ownMon(mon, boosts) {
		const { species, level } = parseDetails(mon.details);
		const sp = this.dex.species.get(species);
		let types = sp.types.slice();
		if (mon.terastallized && mon.terastallized !== 'Stellar') types = [mon.terastallized];
		const maxhp = Number((/\/(\d+)/.exec(mon.condition) || [0, 0])[1]) || 1;
		return {
			species: sp, level, types, origTypes: sp.types, stats: mon.stats, maxhp,
			hp: hpFraction(mon.condition), status: statusOf(mon.condition),
			boosts: boosts || {}, ability: toID(mon.ability || mon.baseAbility || ''),
			abilities: null, moves: mon.moves, teraType: mon.teraType, terastallized: mon.terastallized,
		};
	}

	foeMon() {
		const f = this.foe;
		const sp = this.dex.species.get(f.species);
		const bs = sp.baseStats;
		const stats = {};
		for (const s of ['atk', 'def', 'spa', 'spd', 'spe']) stats[s] = this.estimateStat(bs[s], f.level, false);
		const abilities = this.gen >= 3 ? Object.values(sp.abilities).map(toID) : [];
		const known = this.foeMoves[f.name] ? [...this.foeMoves[f.name]] : [];
		return {
			species: sp, level: f.level, types: f.types, origTypes: sp.types, stats,
			maxhp: this.estimateStat(bs.hp, f.level, true), hp: f.hp, status: f.status,
			boosts: f.boosts, ability: '', abilities, moves: known,
		};
	}

	/**
	 * Expected damage of `moveId` from `att` to `def`, as a fraction of def's max HP
	 * (before capping at its remaining HP). Ignores items, weather and crits.
	 */
	damage(att, moveId, def, teraNow) {
		const move = this.dex.moves.get(moveId);
		if (!move.exists || move.category === 'Status') return 0;
		let attTypes = att.types;
		if (teraNow && att.teraType && att.teraType !== 'Stellar') attTypes = [att.teraType];

		// Type effectiveness, with ability immunities weighted by how likely the foe has them.
		let eff = 1;
		const ignoresImmunity = move.ignoreImmunity === true ||
			(move.ignoreImmunity && move.ignoreImmunity[move.type]);
		if (!ignoresImmunity && !this.dex.getImmunity(move.type, def.types)) return 0;
		eff = Math.pow(2, this.dex.getEffectiveness(move.type, def.types));
		if (moveId === 'freezedry' && def.types.includes('Water')) eff *= 4;
		if (moveId === 'flyingpress') eff *= Math.pow(2, this.dex.getEffectiveness('Flying', def.types));
		if (def.ability) {
			if (IMMUNITY_ABILITIES[def.ability] === move.type) return 0;
		} else if (def.abilities && def.abilities.length) {
			const immune = def.abilities.filter(a => IMMUNITY_ABILITIES[a] === move.type).length;
			eff *= 1 - immune / def.abilities.length;
		}
		if (!eff) return 0;

		// Fixed-damage moves.
		if (move.damage === 'level') return att.level / def.maxhp;
		if (typeof move.damage === 'number') return move.damage / def.maxhp;
		if (move.ohko) return att.level >= def.level ? 1 : 0;
		if (move.damageCallback) {
			if (['superfang', 'naturesmadness', 'ruination'].includes(moveId)) return def.hp / 2;
			return 0.1; // Counter, Mirror Coat, Bide, Endeavor...: hard to predict
		}

		let bp = move.basePower || 60; // callbacks with 0 base power (Low Kick, Gyro Ball...)
		if (move.multihit) {
			bp *= Array.isArray(move.multihit) ? (att.ability === 'skilllink' ? move.multihit[1] : 3.1) :
				(move.multiaccuracy ? Math.min(move.multihit, 6) : move.multihit);
		}
		if (moveId === 'dreameater' && def.status !== 'slp') return 0;
		if (['facade'].includes(moveId) && att.status) bp *= 2;
		if (moveId === 'hex' && def.status) bp *= 2;

		const physical = move.category === 'Physical';
		let atkStat = move.overrideOffensiveStat || (physical ? 'atk' : 'spa');
		const atkSource = move.overrideOffensivePokemon === 'target' ? def : att;
		const defStat = move.overrideDefensiveStat || (physical ? 'def' : 'spd');
		let A = atkSource.stats[atkStat] * boostMultiplier(atkSource.boosts[atkStat]);
		const D = Math.max(1, def.stats[defStat] * boostMultiplier(def.boosts[defStat]));
		if (physical && att.status === 'brn' && att.ability !== 'guts' && moveId !== 'facade') A /= 2;

		let stab = 1;
		if (attTypes.includes(move.type) || att.origTypes.includes(move.type)) {
			stab = att.ability === 'adaptability' ? 2 : 1.5;
			if (teraNow || att.terastallized) {
				if (att.origTypes.includes(move.type) && attTypes.includes(move.type)) stab = 2;
			}
		}
		const base = Math.floor(Math.floor(Math.floor(2 * att.level / 5 + 2) * bp * A / D) / 50) + 2;
		const acc = move.accuracy === true ? 1 : move.accuracy / 100;
		return base * stab * eff * 0.925 * acc / def.maxhp;
	}

	/** Best guess at how hard the foe hits `me` (fraction of my max HP). */
	foeThreat(foe, me) {
		let best = 0;
		for (const id of foe.moves) best = Math.max(best, this.damage(foe, id, me, false));
		// Unknown sets: assume an 80 BP STAB move in its better attacking category.
		const physical = foe.stats.atk >= foe.stats.spa;
		for (const type of foe.types) {
			const probe = this.probeMove(type, physical);
			if (probe) best = Math.max(best, this.damage(foe, probe, me, false));
		}
		return best;
	}

	/** A real move id of the given type/category with ~80 BP, to reuse damage(). */
	probeMove(type, physical) {
		const key = `${this.dex.currentMod}|${type}|${physical}`;
		if (!(key in PROBE_CACHE)) {
			let best = null;
			for (const m of this.dex.moves.all()) {
				if (!m.exists || m.isNonstandard || m.type !== type || m.category === 'Status') continue;
				if ((m.category === 'Physical') !== physical || m.accuracy !== 100) continue;
				if (m.multihit || m.damage || m.damageCallback || m.basePowerCallback || m.flags.charge) continue;
				if (!best || Math.abs(m.basePower - 80) < Math.abs(best.basePower - 80)) best = m;
			}
			PROBE_CACHE[key] = best ? best.id : null;
		}
		return PROBE_CACHE[key];
	}

	speedOf(mon) {
		let spe = mon.stats.spe * boostMultiplier(mon.boosts.spe);
		if (mon.status === 'par') spe *= this.gen >= 7 ? 0.5 : 0.25;
		return spe;
	}

	/** Value of a move in units of "fraction of the foe's HP removed". */
	moveValue(me, foe, moveId, teraNow, threat) {
		const move = this.dex.moves.get(moveId);
		if (moveId === 'recharge' || moveId === 'fight' || moveId === 'struggle') return 0.1;
		if (!move.exists) return 0.05;
		if (move.category !== 'Status') {
			if (moveId === 'fakeout' || moveId === 'firstimpression') {
				if (this.turn !== this.mySwitchInTurn + 1) return 0;
			}
			const dmg = this.damage(me, moveId, foe, teraNow);
			let value = Math.min(dmg, foe.hp);
			if (dmg >= foe.hp && foe.hp > 0) {
				value += 0.3;
				// Priority matters when we would otherwise be outsped and KOed.
				if (move.priority > 0 && this.speedOf(foe) > this.speedOf(me) && threat >= me.hp) value += 0.5;
			}
			if (move.selfdestruct) value *= me.hp < 0.3 ? 1 : 0.25;
			else if (move.self && move.self.volatileStatus === 'mustrecharge' && dmg < foe.hp) value *= 0.7;
			if (move.flags.charge && moveId !== 'solarbeam') value *= 0.5;
			if (moveId === 'solarbeam' || moveId === 'solarblade') value *= 0.6;
			if (moveId === 'focuspunch') value *= 0.3;
			return value;
		}

		// Status moves.
		const targetsFoe = move.target === 'normal' || move.target === 'any' || move.target === 'adjacentFoe';
		const safe = threat < 0.5;
		if (move.status && targetsFoe) {
			if (foe.status || foe.hp <= 0) return 0;
			if (move.status === 'slp' && Object.values(this.foeStatus).includes('slp')) return 0;
			if (move.ignoreImmunity === false && !this.dex.getImmunity(move.type, foe.types)) return 0;
			if (!this.dex.getImmunity(move.status, foe.types)) return 0;
			if (move.flags.powder && foe.types.includes('Grass') && this.gen >= 6) return 0;
			const acc = move.accuracy === true ? 1 : move.accuracy / 100;
			return (STATUS_VALUE[move.status] || 0.1) * acc * Math.min(1, foe.hp * 1.5);
		}
		if (moveId in HEAL_MOVES) {
			if (moveId === 'rest' && (me.hp > 0.4 || me.status === 'slp')) return 0;
			if (me.hp > 0.6) return 0;
			return Math.min(HEAL_MOVES[moveId], 1 - me.hp) * (threat < HEAL_MOVES[moveId] ? 1.2 : 0.5);
		}
		if (move.sideCondition && HAZARDS.includes(move.sideCondition)) {
			if (this.foeSideConditions.has(move.sideCondition)) return 0;
			const foeLeft = this.foeTeamSize - this.foeFainted;
			return foeLeft >= 3 ? 0.25 : 0.05;
		}
		if (move.target === 'self' && move.boosts) {
			let gain = 0;
			for (const stat of SETUP_STATS) {
				if ((move.boosts[stat] || 0) > 0 && (this.myBoosts[stat] || 0) < 2) gain += move.boosts[stat];
			}
			if (this.gen === 1 && move.boosts.spa && (this.myBoosts.spa || 0) < 2) gain += move.boosts.spa;
			if (!gain) return 0.02;
			return me.hp > 0.6 && safe ? 0.15 * gain : 0.02;
		}
		if (moveId === 'leechseed') {
			if (this.foeLeechSeeded || foe.types.includes('Grass')) return 0;
			return 0.2;
		}
		if (moveId === 'substitute') return me.hp > 0.6 && safe ? 0.1 : 0;
		if (move.volatileStatus === 'yawn') return foe.status ? 0 : 0.15;
		if (move.volatileStatus === 'confusion' && targetsFoe) return 0.08;
		return 0.03;
	}

	/** How good `mon` (one of ours, from request.side.pokemon) looks against the current foe. */
	matchup(mon, foe) {
		const me = this.ownMon(mon);
		if (!foe || foe.hp <= 0) {
			// Foe unknown (e.g. simultaneous faints): prefer healthy, strong Pokémon.
			const total = me.stats.atk + me.stats.spa + me.stats.spe;
			return me.hp + total / 2000;
		}
		const threat = this.foeThreat(foe, me);
		let offence = 0;
		for (const id of me.moves) offence = Math.max(offence, this.moveValue(me, foe, id, false, threat));
		const faster = this.speedOf(me) > this.speedOf(foe);
		return offence * (faster ? 1.2 : 1) - 0.6 * Math.min(threat, 1) + 0.2 * me.hp;
	}

	// -- decisions ----------------------------------------------------------

	choose(request, legal) {
		if (request.teamPreview) return legal[0].choice;
		const side = request.side;
		const foe = this.foe ? this.foeMon() : null;

		if (request.forceSwitch) {
			if (legal[0].kind === 'pass') return 'pass';
			if (side.pokemon[0].reviving) {
				return this.argmax(legal, c => {
					const mon = side.pokemon[c.index - 1];
					return mon.stats.atk + mon.stats.spa + mon.stats.spe;
				}).choice;
			}
			return this.argmax(legal, c => this.matchup(side.pokemon[c.index - 1], foe)).choice;
		}

		const activeMon = side.pokemon.find(p => p.active) || side.pokemon[0];
		const me = this.ownMon(activeMon, this.myBoosts);
		const act = request.active[0];
		const moveChoices = legal.filter(c => c.kind === 'move' && !c.gimmick);
		if (!foe || foe.hp <= 0) return this.argmax(moveChoices.filter(c => !c.tera), () => 0).choice;

		const threat = this.foeThreat(foe, me);
		const scored = moveChoices.map(c => {
			const moveId = act.moves[c.index - 1].id;
			let value = this.moveValue(me, foe, moveId, c.tera, threat);
			// Terastallize only when it buys real damage on this move: keeps Tera
			// for a moment where it matters instead of burning it on turn one.
			if (c.tera) {
				const plain = this.moveValue(me, foe, moveId, false, threat);
				value = value > plain * 1.15 + 0.05 ? value + 0.01 : -1;
			}
			return { c, value };
		});
		const best = this.argmax(scored, s => s.value);

		const switchChoices = legal.filter(c => c.kind === 'switch');
		if (switchChoices.length && me.hp > 0.25) {
			const stay = this.matchup(activeMon, foe);
			const alt = this.argmax(switchChoices, c => this.matchup(side.pokemon[c.index - 1], foe));
			const altScore = this.matchup(side.pokemon[alt.index - 1], foe);
			// Switching costs a free hit, so only leave a clearly losing position.
			if (best.value < 0.25 && altScore > stay + 0.35) return alt.choice;
		}
		return this.withGimmick(best.c, legal, me, foe).choice;
	}

	/**
	 * The chosen move with the generation's gimmick when the request offers it: Mega Evolution / Ultra Burst at
	 * once (it only adds stats), a Z-move while the foe has more than half its HP (a Z-move is once a battle, and a
	 * foe a plain hit already finishes would waste it), Dynamax while the active is healthy (three strong turns).
	 */
	withGimmick(choice, legal, me, foe) {
		if (choice.tera) return choice;
		const variant = g => legal.find(c => c.gimmick === g && c.index === choice.index);
		const evolve = variant('mega') || variant('ultra');
		if (evolve) return evolve;
		if (variant('zmove') && foe.hp > 0.5) return variant('zmove');
		if (variant('dynamax') && me.hp >= 0.7) return variant('dynamax');
		return choice;
	}

	/** Highest-scoring item; exact ties broken with the player's PRNG. */
	argmax(items, score) {
		let bestScore = -Infinity;
		let bests = [];
		for (const item of items) {
			const s = score(item);
			if (s > bestScore + 1e-9) {
				bestScore = s;
				bests = [item];
			} else if (Math.abs(s - bestScore) <= 1e-9) {
				bests.push(item);
			}
		}
		return bests.length === 1 ? bests[0] : this.prng.sample(bests);
	}
}

module.exports = {
	legalChoices, RandomPlayer, HeuristicPlayer, hpFraction, isFainted, statusOf, parseIdent, parseDetails,
};
