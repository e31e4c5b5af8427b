"""Typed input failures: bad bytes of one input. Each becomes one quarantine row with its ``reason`` key; none is
fatal to a job."""

from __future__ import annotations


class InputError(Exception):
    """Base of every error that quarantines one input. ``stage`` and ``reason`` key the manifest counts."""

    stage = "parse"
    reason = "parse_error"


class ReadError(InputError):
    """Bytes a container's reader cannot decode: a damaged archive member, a Parquet footer, page or row. A store
    that cannot be read is not an input's fault: it raises ``shards_schema.storage.StorageError`` and the job stops
    (``pipelines/parse_replays.py``)."""

    stage, reason = "read", "corrupt_input"


class CorruptCompressionError(InputError):
    stage, reason = "decode", "corrupt_lz4"


class InvalidJsonError(InputError):
    stage, reason = "decode", "invalid_json"


class InvalidRecordError(InputError):
    """The decoded input lacks fields its format requires."""

    stage, reason = "decode", "invalid_record"


class UnknownFormatError(InputError):
    stage, reason = "validate", "unknown_format"


class ProtocolError(InputError):
    """A battle log line that cannot be applied (malformed, or referring to what does not exist)."""

    stage, reason = "parse", "protocol_error"


class UnknownMessageError(ProtocolError):
    """A protocol message that is not part of the Showdown protocol the parser knows."""

    stage, reason = "parse", "unknown_message"


class TruncatedBattleError(InputError):
    stage, reason = "validate", "truncated_battle"


class IllegalActionError(InputError):
    stage, reason = "validate", "illegal_action"


class SimulatorError(InputError):
    """The simulator reported an error while generating a battle."""

    stage, reason = "generate", "simulator_error"


class ReplayMismatchError(InputError):
    """A Showdown server log whose ``inputLog``, replayed on the pinned simulator, is not the battle the record holds
    (another simulator version, a cut input log), where its recorded log is not to be read instead (it has none, or
    the job asks for exact trajectories only: ``--on-replay-mismatch quarantine``)."""

    stage, reason = "validate", "replay_mismatch"


class NoActivePokemonError(InputError):
    """A decision at which the player has no active Pokémon: there is nothing to choose a move for, so the row
    would be a made-up decision. Seen in logs whose leads switch in after ``|turn|1``."""

    stage, reason = "validate", "no_active_pokemon"
