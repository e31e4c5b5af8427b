'use strict';
/**
 * The built-in players by name, as the generator's --p1/--p2/--p1-teacher and the policy server's --policy take
 * them: the scripted players of players.js and the search player, which builds on HeuristicPlayer
 * (search_player.js requires players.js; nothing requires back).
 */

const { RandomPlayer, HeuristicPlayer } = require('./players');
const { SearchPlayer } = require('./search_player');

const POLICIES = { random: RandomPlayer, heuristic: HeuristicPlayer, search: SearchPlayer };

module.exports = { POLICIES };
