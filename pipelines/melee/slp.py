"""One Slippi replay (.slp bytes) → per-frame rows of the ``melee_frames`` schema and one games-index row.

Built on peppi (Rust) through peppi-py-vladfi 0.9.2 (module ``peppi_py``; the build that reads Slippi 3.0-3.6, see
docs/melee.md). This reads its raw Arrow frames (``peppi_py._peppi.read_slippi``), which keep items in the ``item``
list of each frame. Everything is columnar: rollback dedupe, version gating and projectile summaries are numpy/Arrow
operations over whole games. A file peppi refuses is rewritten once (``repair``: events peppi does not support
dropped, a recording that stopped early cut to its last whole frame) and read again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import peppi_py._peppi as peppi
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.errors import InputError
from shards_schema.melee import FRAMES_SCHEMA, PROJECTILE_SLOTS, PROJECTILE_TYPE, SLOT_NAMES

# Character-made items (Mario's fireball .. Mario/Luigi coin in peppi's item enum). Not projectiles: regular items
# (0-42), stage enemies (43-47), Pokémon and their attacks (160-206), stage entities such as Shy Guys (208+).
PROJECTILE_TYPES = (48, 159)
# A projectile is a character item in flight, released by its owner. The game's own item tables
# (doldecomp/melee: src/melee/it/forward.h names each kind, it_3F2F.c gives each its callbacks) tell two other
# kinds of character item apart; bracketed names are the game's where peppi's enum differs:
# 1. Items that never leave their owner: props held in hand, tethers, and effects drawn on the body. In real games
#    the blaster was a quarter to half of all item entries, at distance 0 from the hand holding it.
ATTACHED_TYPES = {
    51: "KIRBY_HAMMER",
    56: "FOX_SHADOW", 57: "FALCO_SHADOW",  # the after-image of Illusion / Phantasm
    62: "LINK_HOOKSHOT", 63: "YOUNG_LINK_HOOKSHOT", 96: "SAMUS_GRAPPLE_BEAM", 97: "SHEIK_CHAIN",
    113: "ICE_CLIMBERS_UP_B [belay string]",
    74: "FOX_BLASTER", 75: "FALCO_BLASTER", 138: "KIRBY_COPY_FOX_BLASTER", 139: "KIRBY_COPY_FALCO_BLASTER",
    76: "LINK_ARROW_2 [Link_Bow]", 77: "YOUNG_LINK_ARROW [CLink_Bow]", 142: "KIRBY_COPY_LINK_ARROW_2 [Kirby_LinkBow]",
    143: "KIRBY_COPY_YOUNG_LINK_ARROW_2 [Kirby_CLinkBow]",
    80: "SHEIK_NEEDLE_2 [Seak_NeedleHeld]", 153: "KIRBY_COPY_SHEIK_NEEDLE_2 [Kirby_SeakNeedleHeld]",
    83: "MARIO_CAPE", 84: "DR_MARIO_CAPE", 85: "SHEIK_SMOKE [Seak_Vanish]",
    87: "YOSHI_TONGUE_1 [Yoshi_EggLay: the egg around a swallowed opponent]",
    157: "YOSHI_TONGUE_2 [Kirby_YoshiEggLay]",
    101: "NESS_BAT", 102: "NESS_YOYO", 103: "PEACH_PARASOL", 104: "PEACH_TOAD", 134: "KIRBY_COPY_PEACH_TOAD",
    # Mr. Game & Watch's attacks are props in his hands; only Chef's sausages (122) leave him.
    114: "GAME_AND_WATCH_PESTICIDE", 115: "GAME_AND_WATCH_MANHOLE", 116: "GAME_AND_WATCH_FIRE",
    117: "GAME_AND_WATCH_PARACHUTE", 118: "GAME_AND_WATCH_TURTLE", 119: "GAME_AND_WATCH_SPERKY",
    120: "GAME_AND_WATCH_JUDGE", 121: "[GameWatch_Panic]", 124: "GAME_AND_WATCH_FIREFIGHTER",
    156: "[Kirby_GameWatchChefPan]", 123: "GAME_AND_WATCH_MILK [CLink_Milk: Young Link's taunt]",
}
# 2. Items held in hand until thrown, fired or released: while held they are in the state their picked-up
#    callback sets (the turnip in Peach's hand, a bomb in Link's, a charging shot in Samus's cannon).
HELD_STATES = {
    49: (6,),  # DR_MARIO_PILL
    58: (0,), 59: (0,),  # LINK_BOMB, YOUNG_LINK_BOMB
    64: (0,), 65: (0,), 140: (0,), 141: (0,),  # arrows, nocked while the bow charges
    86: (0,),  # YOSHI_EGG_2 [Yoshi_EggThrow]
    94: (0,), 151: (0,),  # SAMUS_CHARGE_SHOT and Kirby's copy, charging
    99: (0, 4),  # PEACH_TURNIP: pulled, and caught again
    112: (0,), 144: (0,),  # MEWTWO_SHADOW_BALL and Kirby's copy, charging
}


def _projectile_table() -> np.ndarray:
    """``table[type, state]``: whether an item of that type in that state is a projectile."""
    table = np.zeros((PROJECTILE_TYPES[1] + 1, 256), bool)
    table[PROJECTILE_TYPES[0]:] = True
    table[list(ATTACHED_TYPES)] = False
    for item_type, states in HELD_STATES.items():
        table[item_type, list(states)] = False
    return table


IS_PROJECTILE = _projectile_table()
END_METHODS = {"Unresolved": 0, "Time": 1, "Game": 2, "Resolved": 3, "NoContest": 7}
PORTS = ("P1", "P2", "P3", "P4")
FRAME_PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 1, "use_dictionary": ["game_id"],
                         "write_statistics": ["game_id", "frame"]}
"""Per-frame numeric shards: dictionaries on float columns cost time and bytes (measured on the shared replays:
0.93 vs 1.37 µs/frame to write, 15.6 vs 21.5 bytes/frame)."""


class SlpError(InputError):
    """peppi could not read the file (corrupt, truncated, or an event table it rejects)."""

    stage, reason = "parse", "unreadable_slp"


class UnsupportedSlpError(SlpError):
    """A complete, well-formed Slippi file whose content peppi rejects (an unknown Game End method, a value of a
    mode or setting it does not know): a replay this parser cannot read, not damaged bytes."""

    stage, reason = "parse", "unsupported_slp"


class NonContiguousFramesError(InputError):
    stage, reason = "validate", "non_contiguous_frames"


@dataclass(frozen=True, kw_only=True)
class SlpFilters:
    """Which games to keep (defaults as public training sets use).

    Attributes:
        min_frames: minimum unique frames (about 20 s of play by default).
        allow_cpu: keep games with a CPU player.
        min_version: lowest Slippi version accepted.
        max_major: highest major Slippi version whose layout this parser knows.
    """

    min_frames: int = 1200
    allow_cpu: bool = False
    min_version: tuple[int, int, int] = (0, 1, 0)
    max_major: int = 3


class _ReplayFile:
    """One reusable in-memory file per process that peppi reads replays from by path.

    peppi's Python binding reads only paths. A fresh temporary file per replay cost ~0.2 µs per frame in page allocation
    and unlinking (a quarter of peppi's own read); an anonymous memory file that is overwritten in place keeps its
    pages. Falls back to a tmpfs temporary file where ``memfd_create`` does not exist."""

    fd: int | None = None

    @classmethod
    def path_with(cls, data: bytes) -> str | None:
        if not hasattr(os, "memfd_create"):
            return None
        if cls.fd is None:
            cls.fd = os.memfd_create("replayforge-slp")
        view, written = memoryview(data), 0
        while written < len(view):
            written += os.pwrite(cls.fd, view[written:], written)
        os.ftruncate(cls.fd, len(view))
        return f"/proc/self/fd/{cls.fd}"


def _peppi_read(data: bytes | None, path: str | None):
    """peppi's raw Arrow game from a replay's bytes or, for a local file, its path; peppi's own errors pass through."""
    if path is None:
        path = _ReplayFile.path_with(data)
    if path is not None:
        return peppi.read_slippi(path, False)
    # peppi reads paths; a tmpfs file keeps archive members off the disk
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(suffix=".slp", dir=directory) as fh:
        fh.write(data)
        fh.flush()
        return peppi.read_slippi(fh.name, False)


def _read(data: bytes, path: str | None = None) -> tuple[object, Repair | None]:
    """peppi's raw Arrow game, and the repair it needed (None: peppi read the bytes as they are).

    A file is repaired only after peppi has refused it, so a file peppi reads costs nothing more (``repair``: events
    peppi does not support dropped, a stopped recording read up to its last whole frame). A file ``repair`` cannot
    walk by its own payload table is quarantined with peppi's message, as is one that still fails once repaired; a
    stopped recording without a whole frame is quarantined saying so."""
    try:
        return _peppi_read(data, path), None
    except BaseException as err:  # noqa: BLE001 - peppi raises OSError/ValueError/pyo3 panics on bad files
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        refused = err
    try:
        fixed = repair(data)
    except SlpError as err:
        raise SlpError(f"{err} (peppi: {_why(refused)})") from refused
    if fixed is None:
        raise _rejected(data, refused) from refused
    candidate, last = fixed, None
    while candidate is not None:
        try:
            return _peppi_read(candidate.data, None), candidate
        except BaseException as err:  # noqa: BLE001 - as above
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            last = err
        candidate = candidate.without_metadata
    raise _rejected(data, refused, f"; and after {fixed.summary()}: {_why(last)}") from last


def _why(err: BaseException) -> str:
    """peppi's message. A Rust panic arrives as pyo3's ``PanicException`` (a ``BaseException``) whose text is the
    panic's, e.g. ``called `Result::unwrap()` on an `Err` value: OutOfSpec(...)``; its source line goes to stderr."""
    return f"{type(err).__name__}: {str(err)[:300]}"


def _rejected(data: bytes, err: BaseException, more: str = "") -> SlpError:
    why = _why(err) + more
    if _well_formed(data):
        return UnsupportedSlpError(f"a complete Slippi file that peppi rejects: {why}")
    return SlpError(f"peppi cannot read it: {why}")


_RAW_HEADER = b"{U\x03raw[$U#l"
_METADATA_KEY = b"U\x08metadata{"


def _well_formed(data: bytes) -> bool:
    """Whether ``data`` has the whole outer structure of a Slippi file (``slp_format.md`` §1.11): the UBJSON wrapper,
    a raw element whose declared length fits the file (0 while a console is still writing it), an Event Payloads
    table that declares Game Start and Game End and is followed by Game Start, then the metadata and the closing
    brace. Random bytes and cut files fail it; a file peppi rejects although it passes is a replay peppi does not
    support, not a damaged one."""
    head = len(_RAW_HEADER)
    if len(data) < head + 6 or not data.startswith(_RAW_HEADER):
        return False
    raw_len = int.from_bytes(data[head:head + 4], "big")
    raw, rest = data[head + 4:head + 4 + raw_len], data[head + 4 + raw_len:]
    if raw_len == 0 or len(raw) < raw_len or raw[0] != 0x35:
        return False
    table_size = raw[1]
    table = raw[2:1 + table_size]
    codes = {table[i] for i in range(0, len(table) - 2, 3)}
    if (table_size - 1) % 3 or not {0x36, 0x39} <= codes or raw[1 + table_size:2 + table_size] != b"\x36":
        return False
    return _whole_tail(rest)


def _whole_tail(rest: bytes) -> bool:
    """Whether the bytes after the raw element close the file: the metadata object and the closing brace, or the
    brace alone."""
    return rest == b"}" or (rest.startswith(_METADATA_KEY) and rest.endswith(b"}}"))


EVENT_PAYLOADS, GAME_START, GAME_END = 0x35, 0x36, 0x39
PRE_FRAME, POST_FRAME, FRAME_START, ITEM, FRAME_BOOKEND = 0x37, 0x38, 0x3A, 0x3B, 0x3C
MESSAGE_SPLITTER, GECKO_LIST = 0x10, 0x3D
FRAME_EVENTS = (PRE_FRAME, POST_FRAME, FRAME_START, ITEM, FRAME_BOOKEND)
PEPPI_EVENTS_SINCE = {
    0x36: (0, 0), 0x37: (0, 0), 0x38: (0, 0), 0x39: (0, 0),  # Game Start, pre-frame, post-frame, Game End
    0x10: (0, 0), 0x3D: (0, 0),  # Message Splitter and the Gecko List it carries
    0x3A: (2, 2),  # Frame Start
    0x3B: (3, 0), 0x3C: (3, 0),  # Item Update, Frame Bookend
    0x3F: (3, 17), 0x40: (3, 17), 0x41: (3, 17),  # FoD platforms, Whispy blow direction, Stadium transformations
}
"""Event codes peppi (peppi-py-vladfi 0.9.2: vladfi1/peppi@f0f8688, ``src/io/slippi/de.rs`` ``parse_event``) parses,
and the first Slippi version whose frames have a column for them. peppi picks a code's column by the file's version,
not by the payload table, so one of these codes in an older file is a Rust panic (measured on the shared files: a FoD
platform event in the v3.16 file, an item in the v2.0 one, a Frame Start in the v0.1 one, each ``called
`Option::unwrap()` on a `None` value``). Every other code peppi skips by its size in the payload table, as the spec
wants, except where it refuses the file: such an event before Game Start (``Invalid event before start``), or a code
declared with size 0 (``zero-size event payload``). It also refuses a second Gecko List (``Multiple Gecko List events
found``), which ``repair`` drops."""

INCOMPLETE_REASONS = {
    "raw_length_zero": "the raw element's length is 0 (the file was never closed: the console or Dolphin stopped "
                       "recording); its events are read to where they stop",
    "raw_cut": "the file ends before the raw element's declared length",
    "partial_event": "the file ends inside an event; its bytes are dropped",
    "partial_frame": "the last frame lacks events (its Frame Bookend from 3.0; before, a post-frame update); its "
                     "events are dropped",
    "unfinalized_frames": "frames after the last one the stream marks finalized (Frame Bookend, 3.7+) are dropped: "
                          "rollback may still have replaced them",
    "no_game_end": "the stream has no Game End event: end method null, the winner from the last frame",
    "no_metadata": "the metadata after the raw element is missing or cut: start time null",
    "no_closing_brace": "the file's closing brace is missing",
}
"""Why a game is not ``complete``, in the order the games index lists them (``incomplete_reasons``)."""


@dataclass(frozen=True, kw_only=True)
class Repair:
    """A replay rewritten so that peppi reads it: events peppi does not support taken out, and a recording that
    stopped early cut to its last whole frame and closed.

    Attributes:
        data: the repaired file: the same UBJSON wrapper, the raw element's length and the Event Payloads table
            rewritten, every kept event byte for byte, then the metadata (or none) and the closing brace.
        dropped: events dropped per event code (a code listed in the payload table with no events counts 0): codes
            peppi cannot take in a file of this version, and the Message Splitter events of a second Gecko List.
        reasons: what the file lacks, keys of ``INCOMPLETE_REASONS`` in their order (empty: a whole file).
        stream_cut: the events stop before Game End: the recording stopped, frames after the last finalized one
            are dropped where the version marks them.
        without_metadata: the same repair with the file's metadata dropped, which is read when peppi refuses the
            metadata kept here (a cut metadata object whose end looked whole); None when there is no metadata.
    """

    data: bytes
    dropped: dict[int, int]
    reasons: tuple[str, ...] = ()
    stream_cut: bool = False
    without_metadata: Repair | None = None

    def summary(self) -> str:
        done = []
        if self.dropped:
            counts = sorted(self.dropped.items())
            done.append("dropping " + ", ".join(f"{n} event(s) 0x{code:02X}" for code, n in counts))
        if self.reasons:
            done.append(f"reading what is whole ({', '.join(self.reasons)})")
        return " and ".join(done)


def _walk(raw: bytes, at: int, sizes: dict[int, int]):
    """(code, first byte, end) of each event from ``at`` to the end of ``raw``; a last ``(None, at, why)`` where the
    byte at ``at`` is not a code the table sizes (``"unsized"``) or its event runs past the end (``"partial"``)."""
    while at < len(raw):
        size = sizes.get(raw[at])
        if size is None:
            yield None, at, "unsized"
            return
        if at + 1 + size > len(raw):
            yield None, at, "partial"
            return
        yield raw[at], at, at + 1 + size
        at += 1 + size


def _peppi_supports(code: int, version: tuple[int, ...]) -> bool:
    since = PEPPI_EVENTS_SINCE.get(code)
    return since is not None and version[:2] >= since


def _tails(rest: bytes) -> list[tuple[bytes, tuple[str, ...]]] | None:
    """What may close the repaired file, best first: (bytes after the raw element, what they lack); None when
    ``rest`` is neither the file's closing bytes nor the start of them (damaged bytes)."""
    if _whole_tail(rest):
        return [(rest, ())]
    if rest.startswith(_METADATA_KEY):  # a cut metadata object, or a whole one without the file's closing brace
        closed = [(rest + b"}", ("no_closing_brace",))] if rest.endswith(b"}") else []
        return [*closed, (b"}", ("no_metadata",))]
    if _METADATA_KEY.startswith(rest):
        return [(b"}", ("no_metadata",))]
    return None


def _reason_order(reasons) -> tuple[str, ...]:
    return tuple(r for r in INCOMPLETE_REASONS if r in set(reasons))


def repair(data: bytes) -> Repair | None:
    """The replay rewritten so that peppi can read it, or None when there is nothing to rewrite or the file is too
    damaged to walk; raises ``SlpError`` for a recording that stops before its first whole frame.

    The spec lets a reader skip any event, since Event Payloads (0x35, first in the raw element) gives every code's
    payload size. This walks the raw element's events by that table; the first Game Start gives the version, and only
    events to drop may precede it.

    - Events peppi does not support: the events of codes peppi cannot take in a file of that version
      (``PEPPI_EVENTS_SINCE``) are dropped and their entries leave the payload table, and so are the Message Splitter
      events of a second Gecko List; nothing else changes. In a whole file (the walk ends exactly at the raw
      element's declared length, the metadata and closing brace follow) with no such code in its table, the walk
      stops at the first frame event.
    - A recording that stopped: a raw element of length 0 (the file was never closed) or one that runs past the
      end of the file is read event by event until the events stop (the end of the file, or the first byte that is
      not an event, which must start the metadata), then cut to its last whole frame: through its last Frame
      Bookend from 3.0; before, through the last frame whose every pre-frame update has its post-frame update and
      which holds every player. A raw element whose declared length fits the file must be whole; the metadata and
      closing brace after it may be missing or cut (``_tails``).

    The walk is Python, ~0.7 µs per event (29 ms for the 42,963 events of the shared peppi__v2.0.slp, ~0.1 s for an
    8-minute v3 game), which is why it runs only on files peppi has refused."""
    head = len(_RAW_HEADER)
    if not data.startswith(_RAW_HEADER) or len(data) < head + 6:
        return None
    declared = int.from_bytes(data[head:head + 4], "big")
    body = data[head + 4:]
    open_end = declared == 0 or declared > len(body)  # never closed, or cut: the events say where they stop
    raw, rest = (body, b"") if open_end else (body[:declared], body[declared:])
    if raw[:1] != bytes([EVENT_PAYLOADS]) or (len(raw) > 1 and raw[1] % 3 != 1):
        return None
    if len(raw) < 2 or 1 + raw[1] > len(raw):
        if open_end:
            raise SlpError("the recording stops in its Event Payloads table: no whole frame")
        return None
    table_end = 1 + raw[1]
    sizes: dict[int, int] = {}
    for at in range(2, table_end, 3):
        sizes[raw[at]] = int.from_bytes(raw[at + 1:at + 3], "big")
    if GAME_START not in sizes or GAME_END not in sizes or EVENT_PAYLOADS in sizes:
        return None
    tails = _tails(rest) if not open_end else []
    if tails is None:
        return None
    whole_file = not open_end and not tails[0][1]
    walk = _walk(raw, table_end, sizes)
    before_start = []  # the events up to Game Start, which gives the version
    for span in walk:
        if span[0] is None:
            if open_end and span[2] == "partial":
                raise SlpError("the recording stops before its Game Start is whole: no whole frame")
            return None
        before_start.append(span)
        if span[0] == GAME_START:
            break
    else:
        if open_end:
            raise SlpError("the recording stops before its Game Start: no whole frame")
        return None
    _, start, start_end = before_start[-1]
    if start_end - start < 4 + 0x66 + 0x24 * 3:
        return None
    version = tuple(raw[start + 1:start + 4])
    players = {port for port in range(4) if raw[start + 0x66 + 0x24 * port] != 3}  # player type 3: empty slot
    drop = {code for code in sizes if code != GAME_START and not _peppi_supports(code, version)}
    if any(code not in drop for code, _, _ in before_start[:-1]):
        return None  # an event peppi knows before Game Start
    gecko_size = sizes.get(MESSAGE_SPLITTER, 0)
    dropped_spans = [(code, first, end) for code, first, end in before_start[:-1]]
    geckos = 0  # whole Gecko Lists read so far
    last_end, game_end, stop = start_end, None, None
    bookend_end = None  # end of the last Frame Bookend (3.0+)
    frame_id, pres, posts, frame_whole_end = None, set(), set(), None  # the last frame's events (before 3.0)
    for code, first, end in walk:
        if code is None:
            stop = (first, end)
            break
        if code in drop:
            dropped_spans.append((code, first, end))
        elif code == MESSAGE_SPLITTER and gecko_size >= 516 and raw[first + 515] == GECKO_LIST:
            if geckos:  # a second Gecko List: peppi refuses it, and frames do not use it
                dropped_spans.append((code, first, end))
            elif raw[first + 516]:  # the last block of the first list
                geckos = 1
        elif code == GECKO_LIST:
            if geckos:
                dropped_spans.append((code, first, end))
            geckos = 1
        elif code == FRAME_BOOKEND:
            bookend_end = end
        elif code == GAME_END:
            game_end = end
            if open_end:
                last_end = end
                break
        elif version < (3, 0) and code in (PRE_FRAME, POST_FRAME, FRAME_START) and end - first >= 7:
            this = int.from_bytes(raw[first + 1:first + 5], "big", signed=True)
            if this != frame_id:
                if frame_id is not None:
                    frame_whole_end = first  # every event before this one belongs to whole frames
                frame_id, pres, posts = this, set(), set()
            if code != FRAME_START:
                (pres if code == PRE_FRAME else posts).add((raw[first + 5], raw[first + 6]))
        if whole_file and not drop and code in FRAME_EVENTS and len(dropped_spans) == 0:
            return None  # nothing to drop
        last_end = end
    if stop is not None and not open_end:
        return None  # a declared-whole raw element whose events do not walk: damaged
    reasons: list[str] = []
    keep_end = last_end
    stream_cut = open_end and game_end is None
    if open_end:
        tail_at = stop[0] if stop is not None and stop[1] == "unsized" else last_end if game_end else len(raw)
        tails = _tails(raw[tail_at:]) if tail_at < len(raw) else [(b"}", ("no_metadata",))]
        if tails is None:
            return None  # bytes that are neither events nor the metadata: damaged, not a stopped recording
    if stream_cut:
        reasons.append("raw_length_zero" if declared == 0 else "raw_cut")
        if stop is not None and stop[1] == "partial":
            reasons.append("partial_event")
        if version >= (3, 0):
            whole_end = bookend_end
        elif pres and pres == posts and players <= {port for port, follower in posts if not follower}:
            whole_end = last_end
        else:
            whole_end = frame_whole_end
        if whole_end is None:
            raise SlpError(f"the recording stops before its first whole frame ({', '.join(_reason_order(reasons))})")
        if whole_end < last_end:
            reasons.append("partial_frame")
        keep_end = whole_end
    kept_drops = [(code, first, end) for code, first, end in dropped_spans if end <= keep_end]
    if not kept_drops and not drop and not reasons and not tails[0][1]:
        return None  # nothing to rewrite (a raw length of 0 alone does not stop peppi)
    dropped = dict.fromkeys(drop, 0)
    body_parts, at = [], table_end
    for code, first, end in kept_drops:
        dropped[code] = dropped.get(code, 0) + 1
        body_parts.append(raw[at:first])
        at = end
    body_parts.append(raw[at:keep_end])
    table = b"".join(raw[at:at + 3] for at in range(2, table_end, 3) if raw[at] not in drop)
    new_raw = bytes([EVENT_PAYLOADS, len(table) + 1]) + table + b"".join(body_parts)
    wrapped = _RAW_HEADER + len(new_raw).to_bytes(4, "big") + new_raw
    out = None
    for tail, lacks in reversed(tails):
        out = Repair(data=wrapped + tail, dropped=dropped, reasons=_reason_order([*reasons, *lacks]),
                     stream_cut=stream_cut, without_metadata=out)
    return out


def _field(struct: pa.StructArray | None, *path: str) -> pa.Array | None:
    for name in path:
        if struct is None or struct.type.get_field_index(name) < 0:
            return None
        struct = struct.field(name)
    return struct


def _col(array: pa.Array | None, n: int, arrow_type: pa.DataType, present: bool = True) -> pa.Array:
    """The column cast to its declared type, or all null when the version does not record it."""
    if array is None or not present:
        return pa.nulls(n, type=arrow_type)
    return array if array.type == arrow_type else array.cast(arrow_type)


def _character(frames_post: pa.StructArray, n: int, version: tuple, validity: pa.Array | None) -> pa.StructArray:
    t = FRAMES_SCHEMA.field("p0").type.field("leader").type
    v = version
    vel = _field(frames_post, "velocities")
    cols = {
        "character": _field(frames_post, "character"), "action_state": _field(frames_post, "state"),
        "state_age": _col(_field(frames_post, "state_age"), n, pa.float32(), v >= (0, 2)),
        "x": _field(frames_post, "position", "x"), "y": _field(frames_post, "position", "y"),
        "facing": _field(frames_post, "direction"), "percent": _field(frames_post, "percent"),
        "shield": _field(frames_post, "shield"), "stocks": _field(frames_post, "stocks"),
        "jumps_left": _col(_field(frames_post, "jumps"), n, pa.uint8(), v >= (2, 0)),
        "airborne": _col(_field(frames_post, "airborne"), n, pa.bool_(), v >= (2, 0)),
        "l_cancel": _col(_field(frames_post, "l_cancel"), n, pa.uint8(), v >= (2, 0)),
        "hurtbox_state": _col(_field(frames_post, "hurtbox_state"), n, pa.uint8(), v >= (2, 1)),
        "ground_id": _col(_field(frames_post, "ground"), n, pa.uint16(), v >= (2, 0)),
        "last_attack_landed": _field(frames_post, "last_attack_landed"),
        "hitlag": _col(_field(frames_post, "hitlag"), n, pa.float32(), v >= (3, 8)),
        "combo_count": _field(frames_post, "combo_count"),
        "vel_self_x_air": _col(_field(vel, "self_x_air"), n, pa.float32(), v >= (3, 5)),
        "vel_self_y": _col(_field(vel, "self_y"), n, pa.float32(), v >= (3, 5)),
        "vel_attack_x": _col(_field(vel, "knockback_x"), n, pa.float32(), v >= (3, 5)),
        "vel_attack_y": _col(_field(vel, "knockback_y"), n, pa.float32(), v >= (3, 5)),
        "vel_self_x_ground": _col(_field(vel, "self_x_ground"), n, pa.float32(), v >= (3, 5)),
    }
    arrays = [_col(cols[f.name], n, f.type) for f in t]
    if validity is not None:  # slots of absent Nana must still hold valid values in non-nullable children
        arrays = [a if f.nullable or not a.null_count else pc.fill_null(a, pa.scalar(0, f.type) if f.type != pa.bool_()
                  else False) for a, f in zip(arrays, t, strict=True)]
    return pa.StructArray.from_arrays(arrays, fields=list(t), mask=validity)


def _null_structs(n: int, arrow_type: pa.DataType) -> pa.Array:
    """n nulls whose child slots hold default values (``pa.nulls`` leaves them null, which Parquet rejects for
    non-nullable children). Sliced from one cached array per type: building it per game cost ~7% of a short game."""
    cached = _NULL_STRUCTS.get(arrow_type)
    if cached is None or len(cached) < n:
        size = max(n, 2 * len(cached) if cached is not None else 1 << 15)
        cached = _NULL_STRUCTS[arrow_type] = _build_null_structs(size, arrow_type)
    return cached.slice(0, n)


_NULL_STRUCTS: dict[pa.DataType, pa.Array] = {}


def _build_null_structs(n: int, arrow_type: pa.DataType) -> pa.Array:
    all_null = pa.array(np.ones(n, bool))
    children = [_build_null_structs(n, f.type) if pa.types.is_struct(f.type)
                else pa.array(np.zeros(n, f.type.to_pandas_dtype())).cast(f.type) if f.type != pa.string()
                else pa.array([""] * n) for f in arrow_type]
    return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=all_null)


def _repeated_string(value: str, n: int) -> pa.Array:
    """A string column holding ``value`` n times, built from buffers (a Python list of n strings costs more)."""
    encoded = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(encoded)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(encoded * n))


BUTTON_L = 0x40


def _controller(pre: pa.StructArray, n: int, version: tuple) -> pa.StructArray:
    t = FRAMES_SCHEMA.field("p0").type.field("controller").type
    cols = {
        "buttons": _field(pre, "buttons_physical"), "main_x": _field(pre, "joystick", "x"),
        "main_y": _field(pre, "joystick", "y"), "c_x": _field(pre, "cstick", "x"), "c_y": _field(pre, "cstick", "y"),
        "trigger": _field(pre, "triggers"), "trigger_l": _field(pre, "triggers_physical", "l"),
        "trigger_r": _field(pre, "triggers_physical", "r"),
    }
    for name in ("trigger_l", "trigger_r"):
        cols[name] = _unit_interval_or_null(_col(cols[name], n, pa.float32()))
    if version < (2, 0):
        cols["trigger_l"] = _null_where_l_pressed(cols["trigger_l"], _col(cols["buttons"], n, pa.uint16()))
    return pa.StructArray.from_arrays([_col(cols[f.name], n, f.type) for f in t], fields=list(t))


def _unit_interval_or_null(array: pa.Array) -> pa.Array:
    """Physical trigger values outside [0, 1] are garbage, not readings: replays of Slippi 0.1-1.0 carry 3.78e22 in
    every frame's physical R trigger (found when a world model's inputs blew up); they become null."""
    values = array.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = ~((values >= 0.0) & (values <= 1.0))
    if not bad.any():
        return array
    return pa.array(values, pa.float32(), mask=bad | ~pc.is_valid(array).to_numpy(zero_copy_only=False))


def _null_where_l_pressed(trigger_l: pa.Array, buttons: pa.Array) -> pa.Array:
    """Slippi 0.1-1.x files write the physical L trigger as 0.0 on every frame where the digital L button is pressed,
    though a digital press needs the trigger pushed fully down (peppi__v0.1.slp: 1,743 frames with L pressed, all
    0.0, while the processed trigger reads 1.0): such a 0.0 is not a reading and becomes null. Later files hold the
    real value there (2.0.1: 1.0 on all 2,253 L frames of peppi__v2.0.slp), and a 0.0 with L pressed in 3.x is a
    digital-only input (a keyboard or a digital-trigger controller), so only these versions are touched."""
    values = trigger_l.to_numpy(zero_copy_only=False)
    pressed = (buttons.to_numpy(zero_copy_only=False) & BUTTON_L) != 0
    bad = pressed & (values == 0.0)
    if not bad.any():
        return trigger_l
    return pa.array(values, pa.float32(), mask=bad | ~pc.is_valid(trigger_l).to_numpy(zero_copy_only=False))


@dataclass
class _Projectiles:
    """Flattened active projectiles of a game: one entry per (frame, projectile)."""

    frame: np.ndarray  # row index of the frame
    type: np.ndarray
    state: np.ndarray
    x: np.ndarray
    y: np.ndarray
    vx: np.ndarray
    vy: np.ndarray
    owner: np.ndarray | None  # None: the version does not record owners
    spawn_id: np.ndarray


def _projectiles(items: pa.ListArray, version: tuple) -> _Projectiles:
    parents = pc.list_parent_indices(items).to_numpy()
    flat = pc.list_flatten(items)
    types = flat.field("type").to_numpy()
    states = flat.field("state").to_numpy()
    in_range = types <= PROJECTILE_TYPES[1]
    keep = in_range & IS_PROJECTILE[np.where(in_range, types, 0), states]
    spawn = flat.field("id").to_numpy()
    order = np.lexsort((spawn[keep], parents[keep]))  # by frame, then spawn id

    def col(arr):
        return np.asarray(arr)[keep][order]

    owner = col(flat.field("owner").to_numpy()) if version >= (3, 6) and flat.type.get_field_index("owner") >= 0 \
        else None
    return _Projectiles(
        frame=parents[keep][order].astype(np.int64), type=col(types), state=col(states),
        x=col(flat.field("position").field("x").to_numpy()), y=col(flat.field("position").field("y").to_numpy()),
        vx=col(flat.field("velocity").field("x").to_numpy()), vy=col(flat.field("velocity").field("y").to_numpy()),
        owner=owner, spawn_id=col(spawn),
    )


def _slots(p: _Projectiles, n: int) -> tuple[pa.Array, pa.Array]:
    """(num_projectiles, K slots by spawn id) per frame."""
    counts = np.bincount(p.frame, minlength=n).astype(np.int64) if len(p.frame) else np.zeros(n, np.int64)
    starts = np.zeros(n, np.int64)
    starts[1:] = np.cumsum(counts)[:-1]
    rank = np.arange(len(p.frame), dtype=np.int64) - starts[p.frame]
    slots = []
    for k in range(PROJECTILE_SLOTS):
        take = rank == k
        frame = p.frame[take]
        valid = np.zeros(n, bool)
        valid[frame] = True

        def spread(values, dtype, take=take, frame=frame):
            out = np.zeros(n, dtype)
            out[frame] = values[take]
            return out

        owner = None if p.owner is None else spread(p.owner, np.int8)
        fields = {
            "type": pa.array(spread(p.type, np.uint16)), "state": pa.array(spread(p.state, np.uint8)),
            "x": pa.array(spread(p.x, np.float32)), "y": pa.array(spread(p.y, np.float32)),
            "vx": pa.array(spread(p.vx, np.float32)), "vy": pa.array(spread(p.vy, np.float32)),
            "owner": pa.nulls(n, pa.int8()) if owner is None else pa.array(owner, mask=~valid | (owner < 0)),
            "spawn_id": pa.array(spread(p.spawn_id, np.uint32)),
        }
        slots.append(pa.StructArray.from_arrays([fields[f.name] for f in PROJECTILE_TYPE],
                                                fields=list(PROJECTILE_TYPE), mask=pa.array(~valid)))
    slots_type = FRAMES_SCHEMA.field("projectiles").type
    return (pa.array(counts.astype(np.uint8), pa.uint8()),
            pa.StructArray.from_arrays(slots, fields=[slots_type.field(name) for name in SLOT_NAMES]))


def _nearest(p: _Projectiles, n: int, me_x: np.ndarray, me_y: np.ndarray, foe_port: int):
    """Offset and type of the nearest projectile owned by the opponent, per frame (null where none/unknown)."""
    if p.owner is None:
        return pa.nulls(n, pa.float32()), pa.nulls(n, pa.float32()), pa.nulls(n, pa.uint16())
    mine = p.owner == foe_port
    frame = p.frame[mine]
    dx = p.x[mine] - me_x[frame]
    dy = p.y[mine] - me_y[frame]
    order = np.lexsort((dx * dx + dy * dy, frame))
    first = np.unique(frame[order], return_index=True)[1]
    best = order[first]
    out_dx, out_dy, out_t = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.uint16)
    valid = np.zeros(n, bool)
    out_dx[frame[best]], out_dy[frame[best]], out_t[frame[best]] = dx[best], dy[best], p.type[mine][best]
    valid[frame[best]] = True
    return pa.array(out_dx, mask=~valid), pa.array(out_dy, mask=~valid), pa.array(out_t, mask=~valid)


def parse_slp(data: bytes, *, input_id: str, source: str, filters: SlpFilters, sha256: str | None = None,
              path: str | None = None) -> tuple[pa.Table | None, dict | str]:
    """(frames table, games-index row without file/row_start) or (None, filter reason).

    ``sha256``: the bytes' digest when the caller has it already (it is the game id); ``path``: the replay as a
    local file holding exactly ``data``, which peppi then reads directly."""
    game, repair = _read(data, path)
    start = game.start
    version = tuple(start["slippi"]["version"][:3])
    if version < filters.min_version or version[0] > filters.max_major:
        return None, "unsupported_version"
    players = [pl for pl in start["players"] if pl.get("type") not in (None, "Empty")]
    if len(players) != 2:
        return None, "not_two_players"
    if not filters.allow_cpu and any(pl.get("type") == "Cpu" for pl in players):
        return None, "cpu_player"
    frames = game.frames
    if frames is None or len(frames) == 0:
        raise SlpError("the replay has no frames")
    reasons = list(repair.reasons) if repair else []
    if repair is not None and repair.stream_cut and version >= (3, 7):
        frames = _finalized(frames, reasons)
    if game.end is None:
        reasons.append("no_game_end")
    ids = frames.field("id").to_numpy()
    # Rollback re-sends frames with the same id: keep the last copy of each (it is the one the game kept).
    unique_ids, last_from_end = np.unique(ids[::-1], return_index=True)
    keep = len(ids) - 1 - last_from_end
    if len(unique_ids) and (unique_ids[-1] - unique_ids[0] + 1) != len(unique_ids):
        raise NonContiguousFramesError(f"frame ids {unique_ids[0]}..{unique_ids[-1]} have gaps after rollback dedupe")
    if len(unique_ids) < filters.min_frames:
        return None, "too_short"
    if len(keep) != len(ids) or np.any(np.diff(ids) != 1):  # rollback copies (or disorder) to remove
        frames = frames.take(pa.array(np.sort(keep)))
    n = len(frames)
    port_names = [pl["port"] for pl in players]
    port_structs = frames.field("ports")
    items = frames.field("item") if version >= (3, 0) and frames.type.get_field_index("item") >= 0 else None
    proj = _projectiles(items, version) if items is not None else None
    player_arrays, positions = [], []
    for name in port_names:
        port = port_structs.field(name)
        leader = port.field("leader")
        post = leader.field("post")
        positions.append((post.field("position").field("x").to_numpy(), post.field("position").field("y").to_numpy()))
    for i, name in enumerate(port_names):
        port = port_structs.field(name)
        leader = port.field("leader")
        follower = _field(port, "follower")
        nana = None
        if follower is not None and _field(follower, "post") is not None:
            nana = _character(follower.field("post"), n, version, pc.is_null(follower.field("post")))
        if proj is not None:
            foe = PORTS.index(port_names[1 - i])
            near = _nearest(proj, n, positions[i][0], positions[i][1], foe)
        else:
            near = (pa.nulls(n, pa.float32()), pa.nulls(n, pa.float32()), pa.nulls(n, pa.uint16()))
        t = FRAMES_SCHEMA.field("p0").type
        values = {
            "port": pa.array(np.full(n, PORTS.index(name), np.uint8)),
            "controller": _controller(leader.field("pre"), n, version),
            "leader": _character(leader.field("post"), n, version, None),
            "nana": nana if nana is not None else _null_structs(n, t.field("nana").type),
            "nearest_projectile_dx": near[0], "nearest_projectile_dy": near[1], "nearest_projectile_type": near[2],
        }
        player_arrays.append(pa.StructArray.from_arrays([values[f.name] for f in t], fields=list(t)))
    if proj is not None:
        num, slots = _slots(proj, n)
    else:
        num = pa.nulls(n, pa.uint8())
        slots = _null_structs(n, FRAMES_SCHEMA.field("projectiles").type)
    game_id = sha256 or hashlib.sha256(data).hexdigest()
    table = pa.Table.from_arrays(
        [_repeated_string(game_id, n), pa.array(unique_ids.astype(np.int32)), player_arrays[0],
         player_arrays[1], num, slots], schema=FRAMES_SCHEMA)
    stocks = [post.field("stocks").to_numpy() for post in
              (port_structs.field(nm).field("leader").field("post") for nm in port_names)]
    return table, {
        "game_id": game_id, "source": source, "input_id": input_id,
        "slippi_version": ".".join(map(str, version)), "stage": int(start["stage"]),
        "ports": [PORTS.index(nm) for nm in port_names],
        "characters_external": [int(pl["character"]) for pl in players],
        "characters_internal": [int(port_structs.field(nm).field("leader").field("post").field("character")[0]
                                    .as_py()) for nm in port_names],
        "player_types": [1 if pl.get("type") == "Cpu" else 0 for pl in players],
        "start_time": (game.metadata or {}).get("startAt"),
        "end_method": END_METHODS.get((game.end or {}).get("method")) if game.end else None,
        "winner_port": _winner(game.end, port_names, stocks),
        "complete": not reasons,
        "incomplete_reasons": _reason_order(reasons),
        "repaired_events": sum(repair.dropped.values()) if repair else 0,
        "repaired_codes": sorted(repair.dropped) if repair else [],
        "first_frame": int(unique_ids[0]), "num_frames": n, "rollback_frames": int(len(ids) - n),
        "row_start": 0, "num_rows": n,  # relative to this game; the writer makes them shard offsets
    }


def _finalized(frames: pa.StructArray, reasons: list[str]) -> pa.StructArray:
    """The frames of a stopped 3.7+ recording up to the last one its stream marks finalized: the last Frame
    Bookend's ``latest_finalized_frame``. Rollback can re-send a later frame with other values, but never one at or
    before that frame (so each kept frame's last copy is the one the whole recording would hold); on a console,
    without rollback, it is the frame itself. Adds ``unfinalized_frames`` to ``reasons`` when frames are dropped."""
    finalized = _field(frames, "end", "latest_finalized_frame")
    if finalized is None or finalized[len(frames) - 1].as_py() is None:
        return frames
    keep = pc.less_equal(frames.field("id"), finalized[len(frames) - 1])
    if pc.all(keep).as_py():
        return frames
    reasons.append("unfinalized_frames")
    frames = frames.filter(keep)
    if len(frames) == 0:
        raise SlpError("the recording stops before its first finalized frame")
    return frames


def _winner(end: dict | None, port_names: list[str], stocks: list[np.ndarray]) -> int | None:
    """The winning port, or None when the replay does not tell.

    A game that ended without a result (no contest, or unresolved) has a winner only when a player quit with
    L+R+A+Start: the other one (slippi-js ``getWinners`` rules the same). Its placements do not tell: Slippi 3.13+
    writes the quitter first (slippijs__unranked_game1.slp: P1 quits, placement 0 is P1), and its stocks are those
    of an unfinished game."""
    method = (end or {}).get("method")
    if method in ("NoContest", "Unresolved"):
        quitter = end.get("lras_initiator")
        if quitter in port_names:
            return PORTS.index(port_names[1 - port_names.index(quitter)])
        return None
    placements = (end or {}).get("players")
    if placements:
        for entry in placements:
            if entry.get("placement") == 0 and entry.get("port") in port_names:
                return PORTS.index(entry["port"])
    last = [int(s[-1]) for s in stocks]
    if last[0] > 0 and last[1] == 0:
        return PORTS.index(port_names[0])
    if last[1] > 0 and last[0] == 0:
        return PORTS.index(port_names[1])
    return None
