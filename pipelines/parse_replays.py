"""Parse replays into a versioned shard version, on Ray Data: the dataset is the one the source's parser writes
(``pokemon_turns``, ``melee_frames``, or a registered game's).

    python pipelines/parse_replays.py --source generated --out out/            # the built-in default
    python pipelines/parse_replays.py --source metamon --input DIR --out out/ --formats gen1ou
    python pipelines/parse_replays.py --source hf-raw --input hf://datasets/jakegrigsby/metamon-raw-replays@v1 ...
    ray job submit --working-dir . -- python pipelines/parse_replays.py --source slp --input s3://b/slp --out s3://b/shards

Stages (``pipelines/stages.py``): the ``Source`` named by ``--source`` (``pipelines/registry.py``) plans work
items on the driver, packed into
read tasks of about one shard each; read tasks read raw inputs by URI (``--input`` is a local path, ``s3://``,
``gs://`` or ``hf://``) and cut them into groups of consecutive inputs → an actor pool runs the source's ``Parser``
on each group's inputs and writes the group's shards straight into ``OUT/<dataset>/<version>/`` (``--out`` is a
local path or a URI) → the driver takes each group's small per-input records in input order and writes index,
quarantine and, last, the manifest (``pipelines/writer/``). The last line printed is the published version.
"""

from __future__ import annotations

import sys

from pipelines.cli import command_config
from pipelines.job.config import ParseConfig
from pipelines.job.ray_data import run
from pipelines.writer.publish import LostInputsError
from pipelines.writer.reuse import ReuseError
from shards_schema.storage import StorageError


def store_failure(err: BaseException, kinds: tuple[type, ...] = (StorageError, LostInputsError)):
    """The store failure behind a job's exception (or the error of one of ``kinds``), however Ray wrapped it (a read
    task's ``RayTaskError``, Ray Data's ``UserCodeException``), or None when the job failed for another reason. The
    innermost one: Ray's wrapper is an instance of the error it wraps too, but its message is the remote
    traceback."""
    found, seen = None, set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, kinds):
            found = err
        wrapped = getattr(err, "cause", None)  # RayTaskError's
        err = (wrapped if isinstance(wrapped, BaseException) else None) or err.__cause__ or err.__context__
    return found


def main(argv: list[str] | None = None) -> None:
    cfg = command_config(ParseConfig, argv)
    try:
        run(cfg)
    except Exception as err:
        if (unusable := store_failure(err, (ReuseError,))) is not None:
            print(f"[parse] failed: {unusable}\n[parse] nothing was published.", file=sys.stderr)
            sys.exit(1)
        failure = store_failure(err)
        if failure is None:
            raise
        # An outage is not bad data: say what failed and what to do, without the Ray task's traceback around it.
        print(f"[parse] failed: {failure}\n[parse] nothing was published. The store did not deliver these inputs "
              "(an outage, not bad data): re-run the same command once it is reachable (shards already written are "
              "reused), or accept the loss with --max-unreadable N (the version is then named for what it lacks).",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
