"""Build an observation vocabulary file from the exported dex (run once per new observation spec version).

    python pipelines/pokemon/build_vocab.py --version 2.0.0

The written file is committed and never edited in place: a spec version's ids are fixed forever. Ids are line
numbers; the first three lines are ``<pad>``, ``<unk>``, ``<blank>``.
"""

from __future__ import annotations

import argparse

from pipelines.pokemon.dex import _all_gens
from pipelines.pokemon.observation import BLANK, PAD, UNK, VOCAB_DIR

SENTINELS = (
    "nomove noitem unknownitem noability unknownability nostatus noeffect notype unknowntype unknownmove "
    "unknowncategory nofield noweather nocondition noconditions forcedswitch noforcedswitch cantera canzmove "
    "candynamax nogimmick "
    "brn frz par psn tox slp fnt physical special status"
).split()
WEATHERS = "raindance sunnyday sandstorm hail snow snowscape desolateland primordialsea deltastream".split()
# Volatile effects and conditions whose ids are not move, ability or item ids.
EFFECTS = (
    "perish0 perish1 perish2 perish3 stockpile1 stockpile2 stockpile3 typechange mustrecharge lockedmove "
    "transform dynamax confusion smackdown focusenergy flashfire slowstart disable bide rage uproar "
    "protosynthesisatk protosynthesisdef protosynthesisspa protosynthesisspd protosynthesisspe quarkdriveatk "
    "quarkdrivedef quarkdrivespa quarkdrivespd quarkdrivespe fallen1 fallen2 fallen3 fallen4 fallen5 "
    "trapped partiallytrapped fallen threequestionmarks"
).split()


def build(gens: dict[str, dict]) -> list[str]:
    words: set[str] = set(SENTINELS) | set(WEATHERS) | set(EFFECTS)
    for dex in gens.values():
        words |= set(dex["species"]) | set(dex["moves"]) | set(dex["items"]) | set(dex["abilities"])
        words |= {s["base_species"] for s in dex["species"].values()}
        words |= set(dex["types"]) | set(dex.get("formats", []))
    words -= {PAD, UNK, BLANK, ""}
    return [PAD, UNK, BLANK, *sorted(words)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", required=True, help="observation spec version the file is for")
    args = parser.parse_args()
    out = VOCAB_DIR / f"obs-{args.version}.txt"
    if out.exists():
        raise SystemExit(f"{out} exists; a published vocabulary is never rewritten (make a new spec version)")
    words = build(_all_gens())
    out.write_text("\n".join(words) + "\n")
    print(f"{out}: {len(words)} words")


if __name__ == "__main__":
    main()
