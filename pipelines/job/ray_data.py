"""The parse job on Ray: the one module of the job that imports Ray. It starts Ray, sets Ray Data's options and
wires the plain stages (``read.read_groups``, ``parse.ParseInputs``, the writer's publisher) into a Ray Data
pipeline whose groups reach the driver in input order, which publishes the version."""

from __future__ import annotations

import json
import os
import time
import warnings

from pipelines import registry, stages
from pipelines.console import Ticker
from pipelines.job.config import ParseConfig, version_spec
from pipelines.job.parse import ParseInputs
from pipelines.job.progress import ParseProgress, summary
from pipelines.job.read import ReadProgress, group_input_bytes, read_groups
from pipelines.job.reuse_order import ReusedCopies, in_plan_order
from pipelines.ray_start import start_ray
from pipelines.writer.files import drop_rows
from pipelines.writer.publish import VersionPublisher
from pipelines.writer.reuse import EarlierVersion, copy_reused
from pipelines.writer.wire import GroupResult
from shards_schema import storage


def storage_env() -> dict[str, str]:
    """Where the object store is, for the tasks of a local Ray instance: one started before these were set hands
    its workers the environment of its start. Never the keys (see ``storage.LOCATION_VARS``); on a cluster
    (``RAY_ADDRESS``) each node keeps its own settings."""
    return {} if os.environ.get("RAY_ADDRESS") else storage.location_env()


def init_ray(cfg: ParseConfig) -> None:
    """The job's cluster under ``ray job submit``, else a local Ray on 127.0.0.1; token auth on for both."""
    start_ray(num_cpus=cfg.num_cpus, log_to_driver=False)


def configure_data_context(ctx) -> float | None:
    """The job's Ray Data settings on ``ctx`` (a ``DataContext``); returns the read tasks' heartbeat interval in
    seconds (``read_groups``), None where Ray Data's no-progress guard is off."""
    ctx.execution_options.preserve_order = True  # groups reach the driver in input order
    ctx.enable_progress_bars = False  # the job's own progress line instead: plain lines under ray job submit
    # Ray Data warns when an actor pool is larger than its operator's input blocks; the parse actors' inputs are the
    # groups a read task yields, many per task, which its count of blocks (one per read task) does not see
    warnings.filterwarnings("ignore", category=UserWarning,
                            message=r"The minimum number of concurrent actors for 'MapBatches\(ParseInputs\)'")
    # Ray Data holds a task's outputs until they fill a block of this size: at the default 128 MiB the groups of a
    # read task reached the driver all at once as it ended, and the progress line stood still until then. At one
    # byte every group, and every heartbeat of a read task (read_groups), leaves the task as its own block when
    # yielded; a block of one row is never sliced.
    ctx.target_max_block_size = 1
    # A store failure raised in a parse actor (a deferred work item it reads, Source.read_by_parser) reaches the
    # driver as itself inside Ray's RayTaskError, as a read task's does; wrapped in Ray Data's UserCodeException it
    # lost its cause on the way (exceptions pickle without __cause__), and store_failure could not name it
    ctx.raise_original_map_exception = True
    # a read task that fills a group slowly announces itself at a quarter of the guard's timeout (read_groups)
    return ctx.execution_no_progress_timeout_s / 4 if ctx.execution_no_progress_timeout_s > 0 else None


def run(cfg: ParseConfig, *, log=print):
    """Run the job; returns the writer's ``PublishResult``."""
    init_ray(cfg)  # before the first `import ray`: a local instance then binds 127.0.0.1 only (pipelines/ray_start.py)
    import ray.data
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    heartbeat_s = configure_data_context(ray.data.DataContext.get_current())
    source, parser = cfg.make_source(), cfg.parser
    plan = source.plan()
    spec = version_spec(cfg, plan)
    # Groups (and so shards) are cut from the inputs and --shard-size-mb alone, never from the resources: the same
    # inputs and config give the same files, whatever --num-parse-actors. A plan smaller than a group is one group,
    # so a small job's progress line moves once, at its end.
    group_bytes = group_input_bytes(cfg.shard_size_mb, source)
    tasks = stages.pack_tasks(plan.items, group_bytes)
    keys = [stages.task_key(t) for t in tasks]
    earlier = EarlierVersion(cfg.reuse_from, spec) if cfg.reuse_from else None
    reused = earlier.reusable(keys) if earlier is not None else {}
    if len(set(keys)) != len(keys):  # items with the same ids twice: their tasks cannot be told apart
        reused = {}
    todo = [(key, task) for key, task in zip(keys, tasks, strict=True) if key not in reused]
    log(f"[parse] source={cfg.source} formats={cfg.effective_formats or 'all'} work items={len(plan.items)} "
        f"read tasks={len(tasks)} → {spec.uri}")
    if earlier is not None:
        log(f"[parse] reusing {len(reused)} of {len(tasks)} read tasks ({sum(map(len, reused.values()))} shards) "
            f"from {earlier.uri}; reading and parsing {len(todo)}")
    need, have = (cfg.num_parse_actors + 0.5) * cfg.cpus_per_actor, ray.cluster_resources().get("CPU", 0)
    if todo and need > have:  # the actors hold their CPUs for the whole job: without room for a read task nothing moves
        log(f"[parse] warning: {cfg.num_parse_actors} parse actors x {cfg.cpus_per_actor} CPU and a read task need "
            f"{need:g} CPUs, the cluster has {have:g}: the job waits until nodes are added (lower --num-parse-actors "
            "or --cpus-per-actor otherwise)")
    env = storage_env()
    runtime_env = {"runtime_env": {"env_vars": env}} if env else {}
    # on the driver's node: the job ends with that node anyway, and on a lost node the progress line, polled until
    # the end, would fail a job whose every group was parsed
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    reader = ray.remote(num_cpus=0, scheduling_strategy=here)(ReadProgress).remote()
    parsed = iter(())
    if todo:
        ds = ray.data.from_items([{"task": key, "items": json.dumps(task)} for key, task in todo],
                                 override_num_blocks=len(todo))
        # Reads wait on storage and decompress; they ask for half an actor's CPU. A request unlike the actors' also
        # keeps Ray Data from fusing the read into the parse actors, which would then parse every group of a read
        # task (a whole archive) on one actor instead of spreading its groups over all of them.
        reads = ray.data.TaskPoolStrategy(size=min(cfg.num_parse_actors, len(todo))) if source.bounded_reads else None
        ds = ds.map_batches(read_groups, batch_size=1, batch_format="pyarrow", num_cpus=cfg.cpus_per_actor / 2,
                            fn_kwargs={"source": source, "group_bytes": group_bytes, "progress": reader,
                                       "max_unreadable": cfg.max_unreadable, "heartbeat_s": heartbeat_s},
                            compute=reads,
                            **runtime_env)
        ds = ds.map_batches(ParseInputs, batch_format="pyarrow", batch_size=1,
                            compute=ray.data.ActorPoolStrategy(size=cfg.num_parse_actors),
                            num_cpus=cfg.cpus_per_actor,
                            fn_constructor_kwargs={"source": source, "version_uri": spec.uri,
                                                   "shard_size_mb": cfg.shard_size_mb,
                                                   "max_unreadable": cfg.max_unreadable, "progress": reader},
                            **runtime_env)
        parsed = (result for block in ds.iter_batches(batch_format="pyarrow", batch_size=None)
                  for result in GroupResult.from_arrow(block))
    copies = ReusedCopies(ray.remote(num_cpus=0, **runtime_env)(copy_reused).remote, ray.get, earlier.uri, spec.uri,
                          keys, reused) if reused else None
    rewrite = ray.remote(num_cpus=cfg.cpus_per_actor, **runtime_env)(drop_rows)
    publisher = VersionPublisher(spec, schema=parser.schema, index_schema=parser.index_schema,
                                 parquet_options=parser.parquet_options, max_unreadable=cfg.max_unreadable,
                                 rewrite=lambda *args: ray.get(rewrite.remote(*args)),
                                 license=registry.source_license(cfg.source), keep_tasks=True)
    progress = ParseProgress(stages.Plan([item for _, task in todo for item in task], plan.revision), group_bytes,
                             lambda: ray.get(reader.snapshot.remote()), publisher, Ticker(cfg.progress_every_s, log))
    stored = earlier.groups([key for key in keys if key in reused]) if reused else iter(())
    try:
        with progress:
            for result, was_reused in in_plan_order(keys, reused, stored, parsed,
                                                    copies.ready if copies is not None else None):
                publisher.add_group(result)
                if was_reused:
                    progress.reused_inputs += result.num_inputs  # from its columns: no record in Python
                    progress.reused_rows += result.written_rows
        published = publisher.publish()
    except BaseException:
        publisher.abort()
        raise
    for name in published.removed:
        log(f"[parse] removed {name}: a file of a run that was killed or had other contents")
    summary(published, parser, time.monotonic() - progress.start, log, reused_rows=progress.reused_rows)
    return published
