#!/usr/bin/env node
'use strict';
/**
 * Exports per-generation Pokédex data from the installed simulator.
 *
 *   node pipelines/showdown/export_dex.js --out DIR
 *
 * Writes DIR/gen1.json ... DIR/gen9.json, each with sorted keys:
 *   species:   id -> {name, types, base_stats, base_species}
 *   moves:     id -> {name, type, category, base_power, accuracy, priority, max_pp}
 *   items:     id -> name
 *   abilities: id -> name
 *   types:     [type ids]
 *   formats:   [format ids of that generation]
 *   game_types: format id -> game type, for that generation's formats that are not singles (doubles, triples,
 *              multi, freeforall)
 *   format_aliases: alias -> format id, the simulator's aliases (data/aliases) that name a format of that
 *              generation ("mono" -> "gen9monotype")
 *
 * "Exists in gen N" means what Dex.forGen(N) says: the entry exists and is not
 * flagged isNonstandard 'Future'. Other nonstandard flags (Past, CAP, LGPE,
 * Unobtainable, Gigantamax...) are kept, since such things can still show up
 * in some format of that generation. Gen-specific data (gen 1-3 type-based
 * categories, changed base powers, ...) comes from the generation's mod.
 */

const fs = require('fs');
const path = require('path');
const { Dex, toID } = require('pokemon-showdown');

function parseArgs(argv) {
	let out = null;
	for (let i = 0; i < argv.length; i++) {
		if (argv[i] === '--out') out = argv[++i];
		else if (argv[i].startsWith('--out=')) out = argv[i].slice(6);
		else throw new Error(`unknown argument ${argv[i]}`);
	}
	if (!out) throw new Error('usage: export_dex.js --out DIR');
	return { out };
}

function inGen(entry) {
	return entry.exists && entry.isNonstandard !== 'Future';
}

/** Same as Battle#calculatePP with 3 PP Ups, i.e. a move slot's max PP in battle. */
function maxPP(move, gen) {
	if (move.noPPBoosts || move.id === 'trumpcard') return move.pp;
	let pp = Math.floor(move.pp * 8 / 5);
	if (gen <= 2 && move.pp === 40) pp -= 3; // gen 1-2 cap PP at 61
	return pp;
}

// Keys whose values are floats in the schema. JSON.stringify prints 1.0 as
// `1`, which Python would load as int, so these are written as `1.0`.
const FLOAT_KEYS = new Set(['accuracy']);

/** JSON, one entry per line, with object keys sorted at every level. */
function sortedJSON(value, indent = '', key = null) {
	const inner = indent + ' ';
	if (Array.isArray(value)) {
		if (!value.length) return '[]';
		return `[\n${value.map(v => inner + sortedJSON(v, inner)).join(',\n')}\n${indent}]`;
	}
	if (value && typeof value === 'object') {
		const keys = Object.keys(value).sort();
		if (!keys.length) return '{}';
		const body = keys.map(k => `${inner}${JSON.stringify(k)}: ${sortedJSON(value[k], inner, k)}`);
		return `{\n${body.join(',\n')}\n${indent}}`;
	}
	if (FLOAT_KEYS.has(key) && Number.isInteger(value)) return value.toFixed(1);
	return JSON.stringify(value);
}

function exportGen(gen) {
	const dex = Dex.forGen(gen);
	const data = {
		species: {}, moves: {}, items: {}, abilities: {}, types: [], formats: [], game_types: {}, format_aliases: {},
	};

	for (const s of dex.species.all()) {
		if (!inGen(s)) continue;
		data.species[s.id] = {
			name: s.name,
			types: s.types.map(toID),
			base_stats: {
				hp: s.baseStats.hp, atk: s.baseStats.atk, def: s.baseStats.def,
				spa: s.baseStats.spa, spd: s.baseStats.spd, spe: s.baseStats.spe,
			},
			base_species: toID(s.baseSpecies),
		};
	}

	// Iterate the data table rather than moves.all(): the typed Hidden Power
	// variants all report id 'hiddenpower' and would overwrite each other.
	for (const id of Object.keys(dex.data.Moves)) {
		const m = dex.moves.getByID(id);
		if (!inGen(m)) continue;
		data.moves[id] = {
			name: m.name,
			type: toID(m.type),
			category: toID(m.category),
			base_power: m.basePower,
			accuracy: m.accuracy === true ? 1.0 : m.accuracy / 100,
			priority: m.priority,
			max_pp: maxPP(m, gen),
		};
	}

	for (const item of dex.items.all()) {
		if (inGen(item)) data.items[item.id] = item.name;
	}
	for (const ability of dex.abilities.all()) {
		if (inGen(ability)) data.abilities[ability.id] = ability.name;
	}
	data.types = dex.types.all().filter(inGen).map(t => t.id).sort();
	const formats = Dex.formats.all()
		.filter(f => f.effectType === 'Format' && Dex.mod(f.mod).gen === gen)
		.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
	data.formats = formats.map(f => f.id);
	data.game_types = {};
	for (const f of formats) {
		if (f.gameType !== 'singles') data.game_types[f.id] = f.gameType;
	}
	data.format_aliases = {};
	for (const [alias, target] of Dex.loadAliases()) {
		const format = Dex.formats.get(target);
		if (format.exists && format.effectType === 'Format' && Dex.mod(format.mod).gen === gen) {
			data.format_aliases[alias] = format.id;
		}
	}
	return data;
}

function main() {
	let opts;
	try {
		opts = parseArgs(process.argv.slice(2));
	} catch (err) {
		process.stderr.write(`error: ${err.message}\n`);
		process.exit(2);
	}
	fs.mkdirSync(opts.out, { recursive: true });
	for (let gen = 1; gen <= 9; gen++) {
		const data = exportGen(gen);
		const file = path.join(opts.out, `gen${gen}.json`);
		fs.writeFileSync(file, sortedJSON(data) + '\n');
		process.stderr.write(
			`${file}: ${Object.keys(data.species).length} species, ${Object.keys(data.moves).length} moves, ` +
			`${Object.keys(data.items).length} items, ${Object.keys(data.abilities).length} abilities, ` +
			`${data.types.length} types, ${data.formats.length} formats\n`
		);
	}
}

main();
