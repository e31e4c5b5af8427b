"""The one training loop every trainer runs on Ray Train; each trainer brings only a ``Recipe`` (its model, the
windows it reads, its batch and its loss).

On the driver, ``fit`` opens the shard version (or versions, with ``--extra-shards``: one dataset and feature spec,
read as one ``training/windows.VersionUnion``), finds the checkpoint to resume from (``--resume``) or to start from
(``--init-from``) and checks it against the data and the config, lays out the run's stream of window specs from the
resume step on (``training/windows.window_stream``: nothing before it is read) and starts the workers. Each
worker rebuilds the typed config and the recipe, builds the model from the model config the driver resolved (from
the checkpoint when there is one), and steps a ``Learner`` through its slice of each global batch, writing metrics
and self-describing checkpoints (``training/checkpoints.py``) at the config's cadence.

``Learner`` (model, optimizer, one optimizer step on a batch) takes batches from anywhere: PPO feeds it rollouts.
``launch`` (Ray Train's workers, storage, checkpoint keeping and restarts) and ``resume_path`` are the driver side
every trainer shares: ``fit`` and self-play (``training/selfplay.py``) both run through them.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist

from pipelines.cli import command_config
from pipelines.console import Ticker, metrics_line
from shards_schema import storage
from shards_schema.reader import open_version
from training.checkpoints import (
    CheckpointError,
    DataIdentity,
    config_from_dict,
    from_state,
    load_state,
    payload,
    read_checkpoint,
    rng_state,
    set_rng_state,
    shard_identity,
)
from training.loop import (
    MetricsWriter,
    checkpoint_uri,
    init_local_ray,
    latest_checkpoint,
    local_run_folder,
    run_storage,
)
from training.registry import model_kind
from training.windows import VersionUnion, window_batches, window_stream

# ray is imported inside the functions: on the driver only after training/loop.init_local_ray, since Ray reads its
# single-machine setting once, when first imported (pipelines/ray_start.py)


def start_worker(cfg, tag: str):
    """A Ray Train worker's start: intra-op threads, rank, device, TF32 on CUDA, the seed, and one line saying what
    it runs on. ``cfg`` has ``torch_threads``, ``cpus_per_worker`` and ``seed``. Returns (rank, world, device, cuda)."""
    import ray.train  # after start_ray, which imports ray first (its single-machine switch is read once, at import)
    import ray.train.torch

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    cuda = device.type == "cuda"
    if rank == 0:
        print(f"[{tag}] device: {device} ({torch.cuda.get_device_name(device) if cuda else 'CPU, fp32'}), "
              f"{world} worker(s), {torch.get_num_threads()} intra-op thread(s) each")
        if not cuda and torch.get_num_threads() > max(1, int(cfg.cpus_per_worker)):
            print(f"[{tag}] warning: {torch.get_num_threads()} intra-op threads on {cfg.cpus_per_worker} reserved "
                  "CPU(s) oversubscribe the cores; steps slow down several-fold when anything else runs. Leave "
                  "--torch-threads at 0 or raise --cpus-per-worker.")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # every generator a recipe may draw from: with torch's alone, two runs of one seed differed wherever a recipe drew
    # from NumPy or Python (their workers start from OS entropy); a restarted worker restores all three from its
    # checkpoint
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    return rank, world, device, cuda


def check_workers_reach(*uris: str) -> None:
    """Fail before training when a Ray worker cannot list the remote ``uris`` (their parent folders when they do not
    exist yet): a worker with no credentials would otherwise fail only at its first read or checkpoint, deep in a
    Ray Train traceback. Local paths are not checked (a local path on a cluster is the user's choice)."""
    import ray  # after start_ray (see start_worker)

    remote = [u for u in uris if not storage.is_local(u)]
    if not remote:
        return

    def reach(targets: list[str]) -> str | None:
        for uri in targets:
            try:
                storage.exists(uri)
            except OSError as err:
                return f"{uri}: {err}"
        return None

    task = ray.remote(num_cpus=0, runtime_env={"env_vars": storage.location_env()})(reach)
    problem = ray.get(task.remote(remote))
    if problem:
        raise PermissionError(
            f"a Ray worker cannot reach {problem}. Workers read the store with the credentials of their own node: "
            "the environment Ray was started with (start Ray, or this script, after exporting AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), ~/.aws, or the node's instance profile (ray_cluster.yaml); the endpoint and "
            f"region are passed from this process ({', '.join(storage.LOCATION_VARS)}).")


@dataclass(frozen=True, kw_only=True)
class TrainerConfig:
    """What every trainer shares: data, run folder, optimizer, cadence and the Ray Train layout.

    Attributes:
        shards: the shard version folder to train on (a local path or a URI: ``s3://bucket/out/<dataset>/<v>``).
        extra_shards: more shard versions of the same dataset and feature spec, trained on together with --shards:
            each epoch's windows are cut and shuffled over all of them, in the order given (which, with the seed,
            sets the window order: a resumed run must give the same list).
        out: run folder (checkpoints, metrics.csv, wandb); a URI puts the checkpoints on that store and keeps
            metrics.csv and wandb on rank 0's disk under ``runs/<bucket>/<key>`` (``training/loop.local_run_folder``).
        context: steps per training window (turns for the policy; frames K for the world model, whose windows hold
            K+1 frames).
        batch_size: windows per optimizer step, summed over workers (each worker takes an equal slice).
        steps: optimizer steps of the whole run (a resumed run continues up to it).
        lr: learning rate (AdamW; fused on CUDA).
        weight_decay: AdamW weight decay.
        grad_clip: largest gradient norm (gradients are rescaled above it).
        checkpoint_every: steps between checkpoints (and one at the end).
        log_every: steps between metric lines.
        seed: seed of model initialization and of the window order (each epoch shuffled with its own seed).
        num_workers: Ray Train workers.
        max_failures: restarts Ray Train may make after a worker fails (its process or node lost; an error raised in
            the loop too, which then repeats up to that many times). Each restart goes on from the run's latest
            checkpoint with its model, optimizer, RNG states and window position, so the run ends with the weights of
            an uninterrupted one (tests/training/test_train_faults.py). 0: the first failure ends the run; -1: no limit.
        cpus_per_worker: CPUs each worker reserves (fractional on small machines: Ray Train waits for whole CPUs
            otherwise).
        use_gpu: train on GPU workers (bf16 autocast, TF32).
        torch_threads: intra-op threads per worker (0: Ray's default, one per whole reserved CPU). More threads than
            reserved CPUs wait on each other whenever anything else runs: a ``small`` policy step on 2 cores took
            0.55-0.65 s with 2 threads on 1 reserved CPU while the machine was quiet and 3.3 s once other processes
            ran, 0.9-1.1 s with 1 thread either way (benchmarks/policy_train_step.py).
        compile: compile the model with ``torch.compile`` (``nn.Module.compile``: checkpoints keep the plain
            parameter names). Pays off on GPUs for long runs; the first steps are slow while it compiles.
        wandb_mode: auto (online when logged in, else offline), online, offline or disabled.
        resume: continue from the latest checkpoint under --out, with the same data, window length, batch size and
            seed (the architecture comes from the checkpoint).
        init_from: a checkpoint (folder or state.pt, a path or a URI) whose model and weights start this run; the
            optimizer and the step start fresh (fine-tuning). Its feature spec must match the shards'.
    """

    shards: str
    out: str
    extra_shards: list[str] = field(default_factory=list)
    context: int = 32
    batch_size: int = 32
    steps: int = 1000
    lr: float = 3e-4
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    checkpoint_every: int = 200
    log_every: int = 20
    seed: int = 0
    num_workers: int = 1
    max_failures: int = 3
    cpus_per_worker: float = 0.5
    use_gpu: bool = False
    torch_threads: int = 0
    compile: bool = False
    wandb_mode: str = "auto"
    resume: bool = False
    init_from: str | None = None

    def __post_init__(self):
        if self.wandb_mode not in ("auto", "online", "offline", "disabled"):
            raise ValueError("--wandb-mode must be auto, online, offline or disabled")
        if min(self.context, self.batch_size, self.steps, self.checkpoint_every, self.log_every,
               self.num_workers) < 1:
            raise ValueError("--context, --batch-size, --steps, --checkpoint-every, --log-every and --num-workers "
                             "must be at least 1")
        if self.max_failures < -1:
            raise ValueError("--max-failures must be -1 (no limit), 0 (none) or more")
        if self.batch_size % self.num_workers:
            raise ValueError("--batch-size must be a multiple of --num-workers")
        if self.resume and self.init_from:
            raise ValueError("--resume continues a run; --init-from starts a new one from a checkpoint: pick one")

    def shard_paths(self) -> list[str]:
        """Every version trained on: --shards, then --extra-shards."""
        return [self.shards, *self.extra_shards]

    STREAM_FIELDS = ("context", "batch_size", "seed")
    """Fields that shape the window stream: a resumed run must keep them (recipes add their own)."""


class Recipe:
    """A trainer's own part: its config class, model family, windows, batch and loss. ``fit`` does the rest.

    The driver calls ``plan`` (small facts the workers need, e.g. a train/validation split), ``model_config`` and
    ``epoch_windows``; each worker builds ``Recipe(cfg, plan)`` and calls ``on_device``, ``loader``, ``samples``,
    ``loss`` and ``evaluate``."""

    config_class: type = TrainerConfig
    kind: str = ""  # the checkpoint's model family (a key of training.registry.MODEL_KINDS)
    tag: str = "train"  # log prefix and run name
    sample_unit: str = "samples"  # what ``samples`` counts (the throughput metric is ``<unit>_per_s``)
    stream_fields: tuple[str, ...] = ()  # config fields beyond TrainerConfig.STREAM_FIELDS that shape the stream
    runtime_fields: tuple[str, ...] = ()  # model config fields that describe the device, not the architecture

    def __init__(self, cfg, plan: dict):
        self.cfg, self.plan = cfg, plan

    @classmethod
    def make_plan(cls, cfg, version) -> dict:
        """Small facts the driver works out once for every worker (plain values)."""
        return {}

    def model_config(self):
        """The model config this run's flags ask for (a fresh run's architecture)."""
        raise NotImplementedError

    def init_config(self, ckpt):
        """The model config of a run started from checkpoint ``ckpt`` (``--init-from``): its architecture."""
        return ckpt.build_config()

    def on_device(self, model_config, cuda: bool):
        """The model config with its runtime fields set for this worker's device."""
        return model_config

    def epoch_windows(self, version, epoch: int):
        """Epoch ``epoch``'s windows in order (a ``training/windows.cut_windows`` table) of ``version``: a
        ``ShardVersion``, or a ``training/windows.VersionUnion`` whose windows keep its ``version_number`` column."""
        raise NotImplementedError

    def loader(self, model_config):
        """Window specs → padded numpy arrays, in the worker (a ``LoadWindows`` of ``cfg.shard_paths()``), for a
        model of ``model_config`` (e.g. the discount factors whose returns the batches carry)."""
        raise NotImplementedError

    def samples(self, batch: dict) -> int:
        """How many ``sample_unit`` a (numpy) batch trains on."""
        return int(batch["valid"].sum())

    def loss(self, model, batch: dict, step: int):
        """(loss to minimize, {name: scalar tensor or number} to log) of one batch of tensors on the device."""
        raise NotImplementedError

    def evaluate(self, model, device, step: int) -> dict | None:
        """Metrics of a validation pass when one is due after ``step`` (rank 0 only), else None."""
        return None


class Learner:
    """A model, its optimizer and one optimizer step on a batch from anywhere (the window stream here, runner
    actors' rollouts for PPO). bf16 autocast on CUDA, fp32 on CPU; gradients clipped to ``grad_clip``."""

    def __init__(self, model, *, lr: float, weight_decay: float, grad_clip: float, device, compile: bool = False,
                 prepare=None):
        self.device, self.grad_clip = device, grad_clip
        self.cuda = device.type == "cuda"
        if compile:
            model.compile()  # in place: state_dict keys stay those of the plain module
        self.model = prepare(model) if prepare is not None else model.to(device)
        # the fused kernel updates every parameter in one launch; CPU has no fused AdamW
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay,
                                           fused=self.cuda or None)

    @property
    def module(self):
        """The model without its DistributedDataParallel wrapper."""
        return getattr(self.model, "module", self.model)

    def step(self, loss_fn, batch) -> dict:
        """One optimizer step on ``loss_fn(model, batch) -> (loss, parts)``; the parts (detached, still on the
        device: reading them is the caller's choice, at its log cadence, so no step waits on the device)."""
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            loss, parts = loss_fn(self.model, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return {"loss": loss.detach(), **{k: v.detach() if isinstance(v, torch.Tensor) else v
                                          for k, v in parts.items()}}

    def load(self, state: dict, *, optimizer: bool) -> None:
        self.module.load_state_dict(state["model"])
        if optimizer:
            self.optimizer.load_state_dict(state["optimizer"])


PROGRESS_EVERY_S = 10.0
"""Most seconds between a run's progress lines when ``--log-every`` steps take longer."""


class Progress:
    """Throughput and ETA of a run from its first step in this process."""

    def __init__(self, first_step: int, steps: int, unit: str):
        self.first_step, self.steps, self.unit = first_step, steps, unit
        self.start, self.done = time.monotonic(), 0

    def add(self, samples: int) -> None:
        self.done += samples

    def metrics(self, step: int) -> dict:
        elapsed = time.monotonic() - self.start
        per_step = elapsed / max(step - self.first_step, 1)
        return {f"{self.unit}_per_s": self.done / max(elapsed, 1e-9), "elapsed_s": elapsed,
                "eta_s": per_step * (self.steps - step)}


def stream_dataset(windows: pa.Table, block_rows: int = 65536):
    """The Ray Dataset of a window stream, in order (order is preserved when read: the trainer sets
    ``preserve_order``); ``window_batches`` turns it into arrays in each training worker."""
    import ray.data  # not at the top: pipelines.ray_start.start_ray imports ray first (its switches are read at import)

    blocks = [windows.slice(i, block_rows) for i in range(0, max(windows.num_rows, 1), block_rows)]
    return ray.data.from_arrow(blocks)



def _scalars(parts: dict) -> dict:
    return {k: float(v) for k, v in parts.items()}


def report_checkpoint(payload: dict, metrics: dict, rank: int, world: int) -> None:
    """Report metrics with a checkpoint holding ``payload`` plus every worker's RNG state (only rank 0 writes)."""
    import ray.train

    rng = [None] * world
    if world > 1 and dist.is_initialized():
        dist.all_gather_object(rng, rng_state())
    else:
        rng = [rng_state()]
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = None
        if rank == 0:
            torch.save({**payload, "rng": rng}, Path(directory) / "state.pt")
            checkpoint = ray.train.Checkpoint.from_directory(directory)
        ray.train.report(metrics, checkpoint=checkpoint)


def worker_checkpoint(config: dict, device, kind: str):
    """(checkpoint, resuming): the checkpoint a worker starts from, Ray Train's own when it restarted the run (read
    through its filesystem), else ``--resume``'s (``config["resume_path"]``) or ``--init-from``'s
    (``config["init_from"]``, weights only: resuming False), else None. ``kind``: the model family the run trains
    (the driver checked it against the registry, which a worker may lack)."""
    import ray.train

    own = ray.train.get_checkpoint()
    if own is not None:
        with own.as_directory() as directory:
            return from_state(load_state(Path(directory) / "state.pt", device), "Ray Train's checkpoint", kind), True
    if config.get("resume_path"):
        return read_checkpoint(config["resume_path"], device, kind=kind), True
    if config.get("init_from"):
        return read_checkpoint(config["init_from"], device, kind=kind), False
    return None, False


def train_loop_per_worker(config: dict) -> None:
    """Runs on every Ray Train worker: rebuilds the typed config and the recipe, then trains."""
    import ray.train
    import ray.train.torch

    recipe_class = config["recipe"]
    cfg = recipe_class.config_class(**config["cfg"])
    recipe = recipe_class(cfg, config["plan"])
    rank, world, device, cuda = start_worker(cfg, recipe.tag)
    config_cls, model_cls = config["model_kind"].classes()
    model_config = recipe.on_device(config_from_dict(config_cls, config["model_config"]), cuda)
    model = model_cls(model_config)
    if rank == 0:
        print(f"[{recipe.tag}] {model_cls.__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")
    learner = Learner(model, lr=cfg.lr, weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip, device=device,
                      compile=cfg.compile, prepare=ray.train.torch.prepare_model)
    step = 0
    start, resuming = worker_checkpoint(config, device, recipe.kind)
    if start is not None:
        learner.load({"model": start.model, "optimizer": start.optimizer}, optimizer=resuming)
        if resuming:
            set_rng_state(start.rng[rank] if rank < len(start.rng) else start.rng[0])
            step = start.step
    data = DataIdentity(**config["data"])
    shard = ray.train.get_dataset_shard("train")
    per_worker = cfg.batch_size // world
    writer = MetricsWriter(Path(config["run_folder"]), dataclasses.asdict(cfg), cfg.wandb_mode, recipe.tag,
                           total_steps=cfg.steps) if rank == 0 else None
    progress = Progress(step, cfg.steps, recipe.sample_unit)
    ticker = Ticker(PROGRESS_EVERY_S)
    # The stream starts at the driver's resume step; Ray Train restarting the run itself from a later checkpoint
    # (--max-failures) is the one case where a worker skips specs (never loading their windows).
    skip = step - config["first_step"]
    for batch in window_batches(shard, recipe.loader(model_config), cfg.batch_size, first_batch=skip,
                                rows=slice(rank * per_worker, (rank + 1) * per_worker)):
        if step >= cfg.steps:
            break
        samples = recipe.samples(batch)
        tensors = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items() if k != "window"}
        parts = learner.step(lambda m, b, s=step: recipe.loss(m, b, s), tensors)
        step += 1
        progress.add(samples * world)
        save = step % cfg.checkpoint_every == 0 or step == cfg.steps
        metrics = None
        if save or (writer and step % cfg.log_every == 0):
            metrics = {"step": step, **_scalars(parts), **progress.metrics(step)}
        if writer and metrics:
            writer.write(metrics)
        elif writer and ticker.due():  # between --log-every rows: a progress line every few seconds, not stored
            writer.echo({"step": step, **_scalars(parts), **progress.metrics(step)})
        evaluation = recipe.evaluate(learner.module, device, step) if writer else None
        if evaluation:
            writer.write({"step": step, **evaluation}, "eval")
        if save:  # a validation due at a checkpoint goes out with it (what a sweep's scheduler reads)
            report_checkpoint(payload(kind=recipe.kind, model_config=recipe.on_device(model_config, False),
                                      train_config=cfg, step=step, data=data, model=learner.model,
                                      optimizer=learner.optimizer), {**metrics, **(evaluation or {})}, rank, world)
    if writer:
        writer.close()


def _resume_problem(ckpt, cfg, recipe, identity, model_config) -> str | None:
    """Why ``ckpt`` cannot be resumed by this run (another model family, other data, another stream or
    architecture), or None."""
    if ckpt.kind != recipe.kind:
        return f"it holds a {ckpt.kind} model, this trainer trains {recipe.kind}"
    if (ckpt.data.dataset, ckpt.data.versions) != (identity.dataset, identity.versions):
        given = "--shards is" if len(identity.versions) == 1 else "--shards and --extra-shards are"
        return (f"it was trained on {ckpt.data.describe()}, {given} {identity.describe()}; to go on training on "
                "other data start a new run with --init-from")
    for name in (*TrainerConfig.STREAM_FIELDS, *recipe.stream_fields):
        theirs, ours = ckpt.train_config.get(name), getattr(cfg, name)
        if theirs != ours:
            return f"it was trained with --{name.replace('_', '-')} {theirs}, this run asks for {ours}"
    def plain(config: dict) -> dict:  # tuples come back from some stores as lists
        return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()
                if k not in recipe.runtime_fields}

    asked, stored = plain(dataclasses.asdict(model_config)), plain(ckpt.model_config)
    if asked != stored:
        differ = sorted(k for k in set(asked) | set(stored) if asked.get(k) != stored.get(k))
        return (f"its architecture differs from the one these flags ask for in {differ} (the architecture comes "
                "from the checkpoint: leave the model flags as they were)")
    if ckpt.step >= cfg.steps:
        return f"it is at step {ckpt.step} and --steps is {cfg.steps}: nothing to do (raise --steps)"
    return None


def resume_path(out: str, resume: bool) -> str | None:
    """The checkpoint ``--resume`` continues from: the latest under ``out`` (FileNotFoundError when there is none);
    None without ``--resume``."""
    if not resume:
        return None
    latest = latest_checkpoint(out)
    if latest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {storage.join(out, 'ray')}")
    return latest


def launch(train_loop, loop_config: dict, cfg, *, tag: str, num_workers: int = 1, max_failures: int = 0,
           callbacks: tuple = (), name: str = "", datasets: dict | None = None, dataset_config=None):
    """Every trainer's run on Ray Train (``fit``'s and self-play's); Ray Train's ``Result``. ``train_loop`` runs on
    ``num_workers`` workers, each reserving ``cfg.cpus_per_worker`` CPUs (and a GPU with ``cfg.use_gpu``), with
    ``loop_config`` plus ``run_folder`` (rank 0's metrics folder, ``training/loop.local_run_folder``); checkpoints go
    to the run's storage under ``cfg.out`` (the 2 latest kept); after a worker fails, Ray Train restarts the run from
    its latest checkpoint up to ``max_failures`` times. ``callbacks``: Ray Train callbacks (a sweep's
    ``TuneReportCallback``); ``name``: the run's name (default: ``tag`` and the time); ``datasets`` and
    ``dataset_config``: Ray Data inputs of the workers. Called after ``training/loop.init_local_ray``."""
    import ray.train
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        train_loop,
        train_loop_config={**loop_config, "run_folder": str(local_run_folder(cfg.out))},
        scaling_config=ray.train.ScalingConfig(num_workers=num_workers, use_gpu=cfg.use_gpu,
                                               resources_per_worker={"CPU": cfg.cpus_per_worker}),
        run_config=ray.train.RunConfig(name=name or f"{tag}-{time.strftime('%Y%m%d-%H%M%S')}",
                                       **run_storage(cfg.out), callbacks=list(callbacks),
                                       checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
                                       failure_config=ray.train.FailureConfig(max_failures=max_failures)),
        datasets=datasets,
        dataset_config=dataset_config,
    )
    return trainer.fit()


def fit(cfg, recipe_class: type[Recipe], callbacks: tuple = (), name: str = ""):
    """Train ``recipe_class``'s model on ``cfg`` with Ray Train; Ray Train's ``Result``. ``callbacks``: Ray Train
    callbacks (a sweep's ``TuneReportCallback``); ``name``: the run's name (default: the recipe's tag and the
    time)."""
    init_local_ray()  # before the first `import ray`: a local instance then binds 127.0.0.1 only
    import ray
    import ray.train

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    # the window stream's Ray Data bars would print a line per refresh in the worker's log; the run's own progress
    # line says where it is
    ray.data.DataContext.get_current().enable_progress_bars = False
    # workers run in Ray's session folder: a relative path would point there, not where the user meant
    cfg = dataclasses.replace(cfg, shards=storage.normalize(cfg.shards), out=storage.normalize(cfg.out),
                              extra_shards=[storage.normalize(s) for s in cfg.extra_shards])
    versions = [open_version(path) for path in cfg.shard_paths()]
    identity = shard_identity(versions[0], versions[1:])  # refuses versions of another dataset or feature spec
    version = versions[0] if len(versions) == 1 else VersionUnion(versions)  # one version is read as itself
    plan = recipe_class.make_plan(cfg, version)
    recipe = recipe_class(cfg, plan)
    check_workers_reach(*cfg.shard_paths(), cfg.out, *([cfg.init_from] if cfg.init_from else []))
    model_config = recipe.model_config()
    latest, first_step = resume_path(cfg.out, cfg.resume), 0
    if latest:
        ckpt = read_checkpoint(latest)
        problem = _resume_problem(ckpt, cfg, recipe, identity, model_config)
        if problem:
            raise CheckpointError(f"--resume {latest}: {problem}")
        first_step = ckpt.step
        model_config = ckpt.build_config()
    elif cfg.init_from:
        ckpt = read_checkpoint(cfg.init_from, kind=recipe.kind)
        ckpt.check_features(identity)
        model_config = recipe.init_config(ckpt)
    first_epoch = recipe.epoch_windows(version, 0)  # cut once: the stream starts with it, the log line counts it
    windows = window_stream(lambda epoch: first_epoch if epoch == 0 else recipe.epoch_windows(version, epoch),
                            first_step * cfg.batch_size, (cfg.steps - first_step) * cfg.batch_size)
    print(f"[{recipe.tag}] {identity.describe()}: steps {first_step + 1}..{cfg.steps} of "
          f"{cfg.batch_size} windows ({first_epoch.num_rows} windows an epoch)")
    return launch(train_loop_per_worker,
                  {"recipe": recipe_class, "model_kind": model_kind(recipe.kind), "cfg": dataclasses.asdict(cfg),
                   "plan": plan, "model_config": dataclasses.asdict(model_config),
                   "data": dataclasses.asdict(identity), "first_step": first_step, "resume_path": latest,
                   "init_from": cfg.init_from},
                  cfg, tag=recipe.tag, num_workers=cfg.num_workers, max_failures=cfg.max_failures,
                  callbacks=callbacks, name=name, datasets={"train": stream_dataset(windows)},
                  dataset_config=ray.train.DataConfig(datasets_to_split=[]))


def main(config_class: type, recipe_class: type[Recipe], argv: list[str] | None = None):
    """The command line of a trainer: flags from ``config_class``, then ``fit``; prints the final checkpoint's
    folder (a URI on a store), the argument evaluation and play take."""
    cfg = command_config(config_class, argv)
    result = fit(cfg, recipe_class)
    if result.metrics:
        print(metrics_line(recipe_class.tag, result.metrics, cfg.steps, done=True))
    if result.checkpoint:
        print(checkpoint_uri(result.checkpoint, storage.normalize(cfg.out)))
    return result
