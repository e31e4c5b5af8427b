"""The quarantine table: every input that did not become rows, and why (a drop is data)."""

from __future__ import annotations

from dataclasses import dataclass

from shards_schema.declare import arrow_schema

QUARANTINE_VERSION = "1.0.0"


@dataclass(frozen=True, kw_only=True)
class QuarantineRow:
    """One input that was filtered or could not be parsed.

    Attributes:
        input_id: stable id of the input (file path relative to the source root, archive member, battle id).
        source: the source that produced it (``generated``, ``metamon``...).
        kind: ``filtered`` (a rule excluded it) or ``quarantined`` (it is bad input).
        stage: where it stopped: ``read``, ``decode``, ``parse``, ``validate`` or ``filter``.
        error_type: the typed error's class name, or the filter's name.
        reason: short stable reason key counted in the manifest (``corrupt_lz4``, ``illegal_action``...).
        message: the full human-readable message.
        input_sha256: sha256 of the raw input bytes when they could be read.
    """

    input_id: str
    source: str
    kind: str
    stage: str
    error_type: str
    reason: str
    message: str
    input_sha256: str | None


QUARANTINE_SCHEMA = arrow_schema(QuarantineRow, name="quarantine", version=QUARANTINE_VERSION)
