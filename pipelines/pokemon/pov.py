"""First-person trajectories from a player's own simulator stream (``|request|`` JSON + its battle log).

The request gives exact own-team facts (HP, PP, item, ability, tera type, which actions are legal); the log
lines give everything about the opponent that the player saw. Each request that asks for a decision becomes one
row, rendered when the request arrives: in pokemon-showdown 0.11.11 a player's stream sends the log chunk first
and the request after it, so the tracker has seen exactly what the player saw when it chose. The player's recorded
answer is the action. A request the simulator rejected and re-sent (``[Unavailable choice]``) has no recorded
choice and is replaced by the re-sent one. A request the battle ended before its player answered it (a forfeit or a
forced win, in a server log's replay: ``pipelines/showdown/replay_input_log.js`` marks it ``ended``) is a row with
action -1, as a spectator sees a forfeit. A terminal row follows the battle's end.

A slot the generator gave a teacher (``--p1-teacher``) records, at each request, the teacher's choice beside the
player's (``teacher_choice``): it becomes the row's ``teacher_action`` by the same mapping as the action, and must be
legal under the row's mask like the action (``IllegalActionError`` otherwise); a row without one has -1.

The mask is the request's choices, exactly (``unmasked_choices`` names any difference; the live player counts them):
its enabled moves at their team move slots (and tera slots while it can terastallize), its switch targets. Two
requests offer choices of another kind, and take actions of the 13 by this rule (the live player turns the action
back into the same choice through ``Decision.slots``):
- one move that is none of the Pokémon's own, beside switches (Struggle; gen 1's Fight while asleep, frozen or
  partially trapped): action 0, "use a move" (``sole_move``);
- Revival Blessing's choice of a fainted party member to revive: switch actions 4-8 name the fainted party members
  in team order, and the state's ``available_switches`` lists them (fainted), as its request does
  (``switch_targets``).
A request whose one choice is none of the Pokémon's moves (Recharge, Struggle alone) has an empty mask and no
action; a locked move of its own (Outrage, Thrash) is its slot, alone in the mask.
"""

from __future__ import annotations

from pipelines.errors import IllegalActionError, InvalidRecordError, ProtocolError, TruncatedBattleError
from pipelines.pokemon.dex import Dex, UnknownDexEntry, to_id
from pipelines.pokemon.tracker import BattleTracker, Mon, _details, _ident
from pipelines.pokemon.trajectory import TrajectoryMeta, build_rows
from shards_schema.pokemon import NUM_ACTIONS, NUM_MOVES, NUM_SWITCHES

_TERA_OFFSET = NUM_MOVES + NUM_SWITCHES


def _move_key(move_id: str) -> str:
    """Request move ids carry a variable base power (``hiddenpowerfire60``, ``return102``); dex ids do not, and
    no move id ends in a digit."""
    return move_id.rstrip("0123456789")


def _request_key(move_id: str, move_ids: list[str]) -> str:
    """The team's id for a move of the request's active list. Gen 2-7 requests list Hidden Power as ``hiddenpower``
    while the team lists its type (``hiddenpowerrock``): pokemon-showdown 0.11.11, seen in generated gen 2 battles,
    where every Hidden Power choice was recorded as -1 before this."""
    key = _move_key(move_id)
    if key == "hiddenpower" and key not in move_ids:
        return next((m for m in move_ids if m.startswith("hiddenpower")), key)
    return key


def is_reviving(request: dict) -> bool:
    """A Revival Blessing request (gen 9): a forced switch whose targets are the fainted party members; the
    reviving active Pokémon is marked ``reviving`` (pokemon-showdown 0.11.11 ``getSwitchRequestData``)."""
    forced = bool(request.get("forceSwitch") and request["forceSwitch"][0])
    return forced and any(p.get("reviving") for p in request["side"]["pokemon"])


def switch_targets(request: dict) -> list[int]:
    """Request team indices of the switch choices a request offers, in team order: the living benched Pokémon
    (none while the active is trapped), or, for Revival Blessing, the fainted ones it can revive. Switch action
    ``4 + k`` is target ``k`` (the first ``NUM_SWITCHES``). ``maybeTrapped`` (a foe's ability may trap) still
    offers the switches: the server accepts or rejects them."""
    team = request["side"]["pokemon"]
    forced = bool(request.get("forceSwitch") and request["forceSwitch"][0])
    active = None if forced else (request.get("active") or [None])[0]
    if is_reviving(request):
        return [i for i, p in enumerate(team) if not p.get("active") and p["condition"].endswith("fnt")]
    if not forced and active and active.get("trapped"):
        return []
    return [i for i, p in enumerate(team) if not p.get("active") and not p["condition"].endswith("fnt")]


def sole_move(request: dict, move_ids: list[str]) -> str | None:
    """The request key of the move a move request offers in place of the Pokémon's own beside a switch, or None.
    pokemon-showdown 0.11.11's ``getMoveRequestData`` lists one move that is none of the team's (``move_ids``) in
    the Pokémon's place: Struggle when no move is usable (all out of PP, or disabled by Taunt, Disable, a Choice
    lock, Imprison...), gen 1's Fight while its Pokémon is asleep, frozen or partially trapped (Wrap, Bind...: the
    simulator then does what the gen 1 game does), Recharge after Hyper Beam, a locked move that Metronome or
    Mirror Move called. Struggle and Fight come beside the switches unless the Pokémon is trapped, so using it or
    switching is a real choice: the move is ``move 1`` of the request and action 0, "use a move", whatever the
    simulator makes of it (the state still shows the Pokémon's own four moves). Alone (trapped, the last Pokémon,
    Recharge and locked moves always) it is no decision: no action and an empty mask."""
    forced = bool(request.get("forceSwitch") and request["forceSwitch"][0])
    active = None if forced else (request.get("active") or [None])[0]
    listed = (active or {}).get("moves", [])
    if len(listed) != 1 or listed[0].get("disabled") or not switch_targets(request):
        return None
    key = _request_key(listed[0]["id"], move_ids)
    return None if key in move_ids[:NUM_MOVES] else key


def unmasked_choices(request: dict, mask: list[bool], move_ids: list[str]) -> list[str]:
    """Where a 13-action ``mask`` and the choices the server's ``request`` offers differ, one reason per difference:
    an enabled move of the request that is none of the active Pokémon's first four team moves (a move copied by
    Transform or Mimic that the team list lacks: the action space has no slot for it), a move slot the mask opens
    that the request does not enable or the reverse, or another number of switch targets (``switch_targets``:
    Revival Blessing's are the fainted party members). A request's only move that is none of the team's, beside a
    switch (Struggle, gen 1's Fight: ``sole_move``), is slot 0. A request with one choice in all (a locked-in
    Recharge, Struggle alone) decides nothing and is not counted. What the live players count in every decision:
    the server's choices are the truth, and a difference is a cause to find."""
    forced = bool(request.get("forceSwitch") and request["forceSwitch"][0])
    active = None if forced else (request.get("active") or [None])[0]
    offered = [_request_key(m["id"], move_ids) for m in (active or {}).get("moves", []) if not m.get("disabled")]
    targets = len(switch_targets(request))
    if len(offered) + targets <= 1:
        return []
    sole = sole_move(request, move_ids)
    slot_ids = [sole] if sole is not None else move_ids[:NUM_MOVES]
    reasons = [f"request move {key} is not a team move slot" for key in offered if key not in slot_ids]
    enabled = {slot_ids.index(key) for key in offered if key in slot_ids}
    masked_moves = {slot for slot in range(NUM_MOVES) if mask[slot]}
    if masked_moves - enabled:
        reasons.append("mask opens a move the request does not enable")
    if enabled - masked_moves:
        reasons.append("request enables a move the mask does not open")
    masked_switches = sum(mask[NUM_MOVES:_TERA_OFFSET])
    if min(targets, NUM_SWITCHES) != masked_switches:
        reasons.append(f"request offers {targets} switches, mask {masked_switches}")
    return reasons


class Decision:
    """The state, action and exact mask for one request; ``teacher_choice`` is what a teacher beside the player chose
    there (None: no teacher labelled it)."""

    def __init__(self, tracker: BattleTracker, side_id: str, request: dict, choice: str | None,
                 teacher_choice: str | None = None, ended: bool = False):
        self.tracker, self.side_id, self.request, self.choice = tracker, side_id, request, choice
        self.teacher_choice = teacher_choice
        self.ended = ended  # the battle ended before the player answered: no choice, action -1

    def render_state_and_mask(self) -> tuple[dict, list[bool]]:
        tracker, req = self.tracker, self.request
        side = tracker.sides[self.side_id]
        foe = tracker.sides["p2" if self.side_id == "p1" else "p1"]
        team = req["side"]["pokemon"]
        forced = bool(req.get("forceSwitch") and req["forceSwitch"][0])
        self.reviving = is_reviving(req)
        active_req = req.get("active", [None])[0] if not forced else None
        active_slot = next((i for i, p in enumerate(team) if p.get("active")), None)
        # the bench the state shows: the living benched Pokémon (trapped or not), or Revival Blessing's targets
        targets = switch_targets(req)
        switch_slots = targets if self.reviving else [
            i for i, p in enumerate(team) if not p.get("active") and not p["condition"].endswith("fnt")]

        def own(i: int, with_request_moves: bool) -> dict:
            p = team[i]
            _, name = _ident(p["ident"])
            species, level, _ = _details(p["details"])
            mon = side.mons.get(name)
            if mon is None:  # not switched in yet: known from the request alone
                mon = Mon(name, species, level, tracker.gen)
            mon.species, mon.level = species, level
            mon.set_condition(p["condition"])
            mon.item = to_id(p["item"]) if p.get("item") else "noitem"
            if tracker.gen >= 3:
                mon.ability = to_id(p.get("ability") or p.get("baseAbility") or "noability")
            if p.get("teraType"):
                mon.tera_type = to_id(p["teraType"])
            if p.get("terastallized"):
                mon.terastallized, mon.tera_type = True, to_id(p["terastallized"])
                mon.types = [mon.tera_type]
            exact = {}
            if with_request_moves and active_req:
                team_keys = [_move_key(mid) for mid in p["moves"]]
                for m in active_req.get("moves", []):
                    if "pp" in m:
                        exact[_request_key(m["id"], team_keys)] = (m["pp"], m["maxpp"])
                mon.exact_pp.update(exact)
            moves = []
            for mid in p["moves"]:
                key = _move_key(mid)
                try:
                    if key in mon.exact_pp:
                        pp, max_pp = mon.exact_pp[key]
                        moves.append(tracker.move_state(key, pp=pp, max_pp=max_pp))
                    else:
                        moves.append(tracker.move_state(key, used=mon.moves.get(key, 0)))
                except UnknownDexEntry as err:
                    raise ProtocolError(str(err)) from err
            return tracker.mon_state(mon, moves)

        player_active = own(active_slot, True) if active_slot is not None else None
        switches = [own(i, False) for i in switch_slots][:NUM_SWITCHES]
        opponent_active = tracker.mon_state(foe.active) if foe.active is not None else None
        can_tera = bool(active_req and active_req.get("canTerastallize"))
        # a Dynamaxed Pokémon's request lists its Max moves and cannot Dynamax (pokemon-showdown 0.11.11
        # ``getMoveRequestData``); canZMove lists, per move, the Z-move its crystal makes of it
        self.dynamaxed = bool(active_req and active_req.get("maxMoves") and not active_req.get("canDynamax"))
        state = {
            "player_active": player_active, "opponent_active": opponent_active,
            "available_switches": switches,
            "player_prev_move": tracker.prev_move_state(side), "opponent_prev_move": tracker.prev_move_state(foe),
            "player_remaining": sum(1 for p in team if not p["condition"].endswith("fnt")),
            "opponents_remaining": foe.team_size - foe.fainted,
            "player_conditions": tracker.conditions(side), "opponent_conditions": tracker.conditions(foe),
            **tracker.field_state(), "forced_switch": forced, "can_tera": can_tera,
            "can_zmove": bool(active_req and any(active_req.get("canZMove") or ())),
            "can_dynamax": bool(active_req and active_req.get("canDynamax")),
            "opponent_teampreview": list(foe.teampreview),
        }
        mask = [False] * NUM_ACTIONS
        move_ids = [_move_key(m) for m in team[active_slot]["moves"]] if active_slot is not None else []
        sole = sole_move(req, move_ids)
        if sole is not None:  # Struggle or gen 1's Fight beside switches: the request's move 1 is action 0
            mask[0] = True
        elif active_req and not forced:
            for m in active_req.get("moves", []):
                if m.get("disabled"):
                    continue
                key = _request_key(m["id"], move_ids)
                if key in move_ids and move_ids.index(key) < NUM_MOVES:
                    slot = move_ids.index(key)
                    mask[slot] = True
                    if can_tera:
                        mask[_TERA_OFFSET + slot] = True
        for k in range(min(len(targets), NUM_SWITCHES)):
            mask[NUM_MOVES + k] = True
        self._facts = (active_req, move_ids, switch_slots, forced)
        self.sole = sole  # the request's own move at action 0 (``sole_move``), or None
        self._slot_moves = [sole] if sole is not None else move_ids
        self._mask = mask
        return state, mask

    def unmasked(self) -> list[str]:
        """The choices this request offers that the mask does not hold, one reason each (empty when they agree;
        call after ``render_state_and_mask``): ``unmasked_choices`` of this request."""
        _, move_ids, _, _ = self._facts
        return unmasked_choices(self.request, self._mask, move_ids)

    def slots(self) -> tuple[list[str], list[int]]:
        """(request move keys in action order, request team indices of the switch actions), after rendering: what
        a player needs to turn an action id back into a simulator choice. The move keys are the team's moves, or,
        where the request offers one move of its own beside switches (``sole_move``: Struggle, gen 1's Fight), that
        move alone, at action 0; the switch targets are Revival Blessing's fainted party members in its request."""
        _, _, switch_slots, _ = self._facts
        return self._slot_moves, switch_slots

    def powers(self) -> tuple[bool, bool]:
        """(``zmove``, ``dynamax``) of the recorded choice (call after ``render_state_and_mask``)."""
        words = (self.choice or "").split()
        if words[:1] != ["move"]:
            return False, False
        return "zmove" in words[2:], "dynamax" in words[2:] or self.dynamaxed

    def action(self) -> int:
        """The action id of the recorded choice, -1 where the battle ended before one (call after
        ``render_state_and_mask``)."""
        if self.ended and self.choice is None:
            return -1
        return self.action_of(self.choice, self.side_id)

    def teacher_action(self) -> int:
        """The action id of the teacher's choice by the same mapping as ``action``, or -1 where no teacher labelled
        this decision (call after ``render_state_and_mask``)."""
        if self.teacher_choice is None:
            return -1
        if not isinstance(self.teacher_choice, str):
            raise InvalidRecordError(f"{self.side_id}: teacher_choice {self.teacher_choice!r} is not a choice string")
        return self.action_of(self.teacher_choice, f"{self.side_id}'s teacher")

    def action_of(self, answer: str | None, who: str) -> int:
        """The action id of a simulator choice string answered to this request (``who`` answered it, for errors):
        raises ``IllegalActionError`` for a choice the request does not allow."""
        active_req, move_ids, switch_slots, forced = self._facts
        choice = (answer or "").split()
        if not choice:
            raise InvalidRecordError(f"{who}: no recorded choice for a decision request")
        if choice[0] == "switch":  # Revival Blessing's targets are its fainted party members (``switch_targets``)
            slot = int(choice[1]) - 1
            if slot not in switch_slots:
                raise IllegalActionError(f"{who} chose {answer!r}, not an available switch")
            k = switch_slots.index(slot)
            return NUM_MOVES + k if k < NUM_SWITCHES else -1
        if choice[0] == "move" and not forced and active_req:
            listed = active_req.get("moves", [])
            index = int(choice[1]) - 1
            if not 0 <= index < len(listed):
                raise IllegalActionError(f"{who} chose {answer!r} with {len(listed)} moves listed")
            key = _request_key(listed[index]["id"], move_ids)
            if self.sole is not None and key == self.sole:
                return 0  # the request's own move (``sole_move``): action 0
            if key not in move_ids:  # a move no team slot holds (``unmasked_choices`` names it): not an action
                return -1
            slot = move_ids.index(key)
            return (_TERA_OFFSET + slot) if "terastallize" in choice[2:] else slot
        raise IllegalActionError(f"{who} answered {answer!r} to a request that did not allow it")


def decisions(record: dict, side_id: str, dex: Dex) -> tuple[BattleTracker, list[tuple[dict, list[bool], Decision]],
                                                             list[int | None]]:
    """(the tracker at the end of the stream, (state, mask, decision) of each decision request the player answered,
    the battle turn of each) of one player's stream in a generated battle record (see generate_battles.js): the
    requests ``pov_trajectory`` makes rows of, a rejected and re-sent request once."""
    tracker = BattleTracker(dex, record["format"])
    steps: list[tuple[dict, list[bool], Decision]] = []
    turns: list[int | None] = []
    unanswered = False  # the last decision had no recorded choice: only a re-sent request may follow it

    try:
        events = record["streams"][side_id]
    except (KeyError, TypeError) as err:
        raise InvalidRecordError(f"record has no stream for {side_id}") from err
    for event in events:
        kind = event.get("kind")
        if kind == "request":
            req = event["request"]
            if req.get("wait") or req.get("teamPreview"):
                continue  # no decision in the 13-action space
            if unanswered:  # the previous request was rejected and this one re-sent in its place
                steps.pop()
                turns.pop()
            ended = bool(event.get("ended"))
            decision = Decision(tracker, side_id, req, event.get("choice"), event.get("teacher_choice"), ended)
            unanswered = event.get("choice") is None and not ended
            try:
                steps.append(decision.render_state_and_mask() + (decision,))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
                raise InvalidRecordError(f"{side_id}: malformed request: {type(err).__name__}: {err}") from err
            turns.append(tracker.turn)
        elif kind == "update":
            if unanswered:
                raise InvalidRecordError(f"{side_id}: a decision request has no recorded choice")
            for line in event["lines"]:
                tracker.apply(line)
    if unanswered:
        raise InvalidRecordError(f"{side_id}: the last decision request has no recorded choice")
    return tracker, steps, turns


def pov_trajectory(record: dict, side_id: str, dex: Dex) -> list[dict]:
    """Rows of one player's trajectory from a generated battle record (see generate_battles.js)."""
    fmt = record["format"]
    tracker, steps, turns = decisions(record, side_id, dex)
    try:
        powers = [decision.powers() for _, _, decision in steps]
        teacher_actions = [decision.teacher_action() for _, _, decision in steps]
        steps = [(state, decision.action(), mask) for state, mask, decision in steps]
    except (ValueError, IndexError) as err:
        raise InvalidRecordError(f"{side_id}: malformed recorded choice: {err}") from err
    if not tracker.ended:
        raise TruncatedBattleError(f"{record.get('battle_id')}: {side_id}'s stream ends before the battle does")
    foe_id = "p2" if side_id == "p1" else "p1"
    me, foe = tracker.sides[side_id], tracker.sides[foe_id]
    # Terminal row: what the player sees once the battle is over; no action follows.
    if steps:
        final_state = dict(steps[-1][0])
        final_state.update({
            "opponent_active": tracker.mon_state(foe.active) if foe.active else None,
            "opponents_remaining": foe.team_size - foe.fainted,
            "player_prev_move": tracker.prev_move_state(me), "opponent_prev_move": tracker.prev_move_state(foe),
            "forced_switch": False, "can_tera": False, "can_zmove": False, "can_dynamax": False,
            **tracker.field_state(),
        })
        if final_state["player_active"] is not None and me.active is not None:
            final_state["player_active"] = {**final_state["player_active"], "hp_pct": me.active.hp_pct,
                                            "status": me.active.status}
        steps.append((final_state, -1, [False] * NUM_ACTIONS))
        turns.append(tracker.turn)
        powers.append((False, False))
        teacher_actions.append(-1)
    winner = record.get("winner")
    result = "tie" if winner is None else ("win" if winner == side_id else "loss")
    players = record.get("players", {})
    meta = TrajectoryMeta(
        battle_id=record["battle_id"], format=fmt, player_side=side_id,
        player_name=players.get(side_id, {}).get("name"), opponent_name=players.get(foe_id, {}).get("name"),
        result=result, rating=None,
    )
    return build_rows(meta, steps, mask_exact=True, battle_turns=turns, powers=powers,
                      teacher_actions=teacher_actions)
