"""The shard writer: the only code that writes into a shard version, on any store (local folder, s3://, gs://).

A version is ``OUT/<dataset>/<version>/``: ``part-*.parquet`` shards, ``index-*.parquet``, ``quarantine-*.parquet``
and ``manifest.json``. Its name is known before any input is read (``naming.VersionSpec``), so the workers that parse
inputs write their shards straight into it (``groups.GroupWriter``, one group of consecutive inputs at a time,
through ``files``), and hand the driver small per-input records (``wire.GroupResult``). The driver
(``publish.VersionPublisher``) takes the groups in input order, drops duplicates of earlier groups, writes index and
quarantine, and publishes, manifest last; ``reuse`` lets a job over more inputs take an earlier version's tasks.
"""
