"""Spec-valid synthetic Slippi replays (v3.18.0), for tests and the no-download demo.

Writes what ``../shared/reference/slp_format.md`` §1.11 describes: the UBJSON wrapper, an Event Payloads table,
Game Start, and per frame Frame Start, one Pre- and Post-Frame Update per port, Item Updates and a Frame Bookend,
then Game End. Options cover what parsers must survive: any length, projectiles, rollback copies of frames, and a
file cut short. The motion is simple but deterministic (seeded), so parsed values can be checked exactly.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass, field

VERSION = (3, 18, 0)
SIZES = {0x36: 760, 0x37: 66, 0x38: 84, 0x39: 6, 0x3A: 12, 0x3B: 44, 0x3C: 8}
FIRST_FRAME = -123
FOX_LASER = 54
SHYGUY = 210


@dataclass(frozen=True, kw_only=True)
class SyntheticGame:
    """What to write.

    Attributes:
        num_frames: frames from -123 on.
        stage: Slippi stage id (32 Final Destination).
        characters_external: CSS character ids of ports 0 and 1 (2 Fox, 9 Marth).
        characters_internal: internal ids written in post-frame updates (1 Fox, 18 Marth).
        cpu: player types are human unless the port is listed here.
        laser_every: port 0 fires a Fox laser every this many frames (0: never).
        shyguys: a stage Shy Guy (not a projectile) is present on every frame.
        held_items: (item type, state) of items port 0 owns at its own position on every frame (a blaster or a
            turnip in hand, a thrown turnip), spawn ids 20000 on.
        rollback_frames: frame ids written twice (the first copy with wrong positions, as rollback re-sends).
        end_method: Game End method (2 GAME, 1 TIME, 7 NO_CONTEST; others are not valid).
        lras_initiator: the port that quit with L+R+A+Start (-1: none).
        placements: Game End placements of ports 0-3 (-1: none).
        truncate_bytes: cut this many bytes off the end (a file still being written, or damaged).
        seed: randomness of the inputs.
    """

    num_frames: int = 600
    stage: int = 32
    characters_external: tuple[int, int] = (2, 9)
    characters_internal: tuple[int, int] = (1, 18)
    cpu: tuple[int, ...] = ()
    laser_every: int = 30
    shyguys: bool = False
    held_items: tuple[tuple[int, int], ...] = ()
    rollback_frames: tuple[int, ...] = ()
    end_method: int = 2
    lras_initiator: int = -1
    placements: tuple[int, int, int, int] = (0, 1, -1, -1)
    truncate_bytes: int = 0
    seed: int = 0
    extra: dict = field(default_factory=dict)


def position(port: int, frame: int) -> tuple[float, float]:
    """Deterministic path of each character (what tests check the parse against)."""
    x = (-30.0 if port == 0 else 30.0) + 20.0 * math.sin(frame / 40.0 + port)
    y = max(0.0, 15.0 * math.sin(frame / 25.0 + 2 * port))
    return x, y


def percent(port: int, frame: int) -> float:
    return float(max(0, frame) // (50 + 10 * port))


def _event(code: int, body: bytes) -> bytes:
    size = SIZES[code]
    if len(body) > size:
        raise ValueError(f"event {code:#x} body {len(body)} > {size}")
    return bytes([code]) + body + bytes(size - len(body))


def _game_start(g: SyntheticGame) -> bytes:
    info = bytearray(312)
    info[0:4] = bytes([50, 1, 134, 76])
    struct.pack_into(">h", info, 0xB, -1)  # item spawn off (i8 at +0xB; written as the byte pair's high part)
    info[0xB] = 0xFF
    struct.pack_into(">H", info, 0xE, g.stage)
    struct.pack_into(">I", info, 0x10, 480)
    struct.pack_into(">f", info, 0x30, 1.0)
    for port in range(4):
        base = 0x60 + 0x24 * port
        if port < 2:
            info[base] = g.characters_external[port]
            info[base + 1] = 1 if port in g.cpu else 0
            info[base + 2] = 4  # stocks
        else:
            info[base] = 0
            info[base + 1] = 3  # empty slot
        info[base + 0x8] = 9  # handicap
        for off in (0x18, 0x1C, 0x20):
            struct.pack_into(">f", info, base + off, 1.0)
    body = bytearray(SIZES[0x36])
    body[0:4] = bytes([*VERSION, 0])
    body[4:4 + 312] = info
    struct.pack_into(">I", body, 0x13D - 1, 12345)
    body[0x1A3 - 1] = 2
    body[0x1A4 - 1] = 2  # VS
    return _event(0x36, bytes(body))


def _pre(frame: int, port: int, rng: random.Random, wrong: bool) -> bytes:
    x, y = position(port, frame)
    if wrong:
        x += 50.0
    jx, jy = rng.uniform(-1, 1), rng.uniform(-1, 1)
    buttons = rng.choice([0, 0x100, 0x200, 0x400, 0x800, 0x20])
    body = struct.pack(">iBBIHffffffffIHff", frame, port, 0, 0, 14, x, y, 1.0, jx, jy, 0.0, 0.0, 0.0, 0, buttons,
                       0.0, 0.0)
    body += struct.pack(">bf", int(jx * 80), percent(port, frame))
    body += struct.pack(">bbb", int(jy * 80), 0, 0)
    return _event(0x37, body)


def _post(frame: int, port: int, g: SyntheticGame, wrong: bool) -> bytes:
    x, y = position(port, frame)
    if wrong:
        x += 50.0
    # frame, port, follower, internal character, action state, x, y, facing, percent, shield, last attack, combo,
    # last hit by, stocks, state age
    body = struct.pack(">iBBBHfffffBBBBf", frame, port, 0, g.characters_internal[port], 14 + (frame // 60) % 3, x, y,
                       1.0 if port == 0 else -1.0, percent(port, frame), 60.0, 0, 0, 6, 4,
                       float(max(0, frame) % 60))
    body += bytes(5)  # state flags
    body += struct.pack(">fBHBBB", 0.0, 1 if y > 0 else 0, 1, 2, 0, 0)
    body += struct.pack(">fffff", 0.1, 0.2, 0.3, 0.4, 0.5)  # velocities (3.5)
    body += struct.pack(">f", 0.0)  # hitlag (3.8)
    body += struct.pack(">IHH", 0, 0, port + 1)  # animation (3.11), instance hit by / id (3.16)
    return _event(0x38, body)


def _item(frame: int, item_type: int, spawn_id: int, x: float, y: float, owner: int, state: int = 1) -> bytes:
    # frame, type, state, facing, vx, vy, x, y, damage, timer, spawn id, misc[4], owner (3.6), instance (3.16)
    return _event(0x3B, struct.pack(">iHBfffffHfI4sbH", frame, item_type, state, 1.0, 2.5, 0.0, x, y, 0, 60.0,
                                    spawn_id, bytes(4), owner, 0))


def lasers(frame: int, g: SyntheticGame) -> list[tuple[int, float, float]]:
    """Active lasers (spawn id, x, y) on a frame: each lives 20 frames, moving 2.5 per frame."""
    if not g.laser_every:
        return []
    out = []
    for spawn in range(0, frame - FIRST_FRAME + 1):
        born = FIRST_FRAME + spawn * g.laser_every
        if born > frame:
            break
        if frame - born < 20:
            x0, y0 = position(0, born)
            out.append((spawn, x0 + 2.5 * (frame - born), y0 + 5.0))
    return out


def write_slp(g: SyntheticGame) -> bytes:
    rng = random.Random(g.seed)
    payloads = bytes([0x35, 3 * len(SIZES) + 1]) + b"".join(struct.pack(">BH", c, s) for c, s in SIZES.items())
    raw = bytearray(payloads + _game_start(g))
    last = FIRST_FRAME + g.num_frames - 1
    for frame in range(FIRST_FRAME, last + 1):
        copies = [True, False] if frame in g.rollback_frames else [False]
        for wrong in copies:
            raw += _event(0x3A, struct.pack(">iII", frame, 0, 0))
            for port in (0, 1):
                raw += _pre(frame, port, rng, wrong)
            for spawn, x, y in lasers(frame, g):
                raw += _item(frame, FOX_LASER, spawn, x, y, owner=0)
            if g.shyguys:
                raw += _item(frame, SHYGUY, 10_000, 0.0, -20.0, owner=-1)
            for k, (item_type, state) in enumerate(g.held_items):
                raw += _item(frame, item_type, 20_000 + k, *position(0, frame), owner=0, state=state)
            for port in (0, 1):
                raw += _post(frame, port, g, wrong)
            raw += _event(0x3C, struct.pack(">ii", frame, frame))
    raw += _event(0x39, struct.pack(">Bbbbbb", g.end_method, g.lras_initiator, *g.placements))
    out = b"{U\x03raw[$U#l" + struct.pack(">I", len(raw)) + bytes(raw)
    out += b"U\x08metadata{U\x07startAtSU\x142026-01-02T03:04:05ZU\x09lastFramel" + struct.pack(">i", last) + b"}}"
    if g.truncate_bytes:
        out = out[: len(out) - g.truncate_bytes]
    return out
