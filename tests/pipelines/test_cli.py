"""The CLI generated from config dataclasses (``pipelines/cli.py``): every flag's help is its field's whole doc,
inherited fields included."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from pipelines.cli import chosen_section, field_help, nest, parse_config, parser_for


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseConfig:
    """What every job shares.

    Attributes:
        out: run folder.
        steps: optimizer steps of the whole run; a resumed run
            continues up to it.

            Counted over all workers, 50% of them at most idle.
        seed: base seed.
    """

    out: str
    steps: int = 10
    seed: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChildConfig(BaseConfig):
    """A job with its own fields.

    Attributes:
        seed: seed of the child's model (not the base's words).
        preset:
            model size, on the line after its name.

    Returns:
        nothing: a section after Attributes is not a field.
    """

    steps: int = 20  # a new default, no new doc: the base's doc stays
    seed: int = 1
    preset: str = "tiny"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_a_multi_line_doc_appears_whole_in_help():
    text = _flat(parser_for(BaseConfig).format_help())
    assert ("--steps STEPS optimizer steps of the whole run; a resumed run continues up to it. Counted over all "
            "workers, 50% of them at most idle.") in text


def test_inherited_fields_get_their_base_doc_and_the_subclass_doc_wins():
    docs = field_help(ChildConfig)
    assert docs == {
        "out": "run folder.",
        "steps": "optimizer steps of the whole run; a resumed run continues up to it. Counted over all workers, "
                 "50% of them at most idle.",
        "seed": "seed of the child's model (not the base's words).",
        "preset": "model size, on the line after its name.",
    }
    text = _flat(parser_for(ChildConfig).format_help())
    assert "--out OUT run folder." in text and "--seed SEED seed of the child's model" in text
    assert "base seed" not in text and "nothing" not in text
    cfg = parse_config(ChildConfig, ["--out", "o", "--preset", "base"])
    assert (cfg.out, cfg.steps, cfg.seed, cfg.preset) == ("o", 20, 1, "base")


ENTRY_POINTS = ["pipelines.parse_replays:ParseConfig", "pipelines.pokemon.refeaturize:RefeaturizeConfig",
                "training.melee.world_model:WorldModelTrainConfig", "training.pokemon.offline_rl:TrainConfig",
                "training.melee.world_model_play:PlayConfig", "training.pokemon.evaluate:EvalConfig"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_flag_of_every_entry_point_has_its_doc(entry):
    module, name = entry.split(":")
    cls = getattr(importlib.import_module(module), name)
    parser = parser_for(cls)
    undocumented = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert undocumented == [], f"{name}: flags without a doc in its (or its bases') Attributes: {undocumented}"
    parser.format_help()  # a doc argparse cannot format (a bare %) fails here


def test_shard_size_mb_is_mib_in_the_help_the_writer_and_the_summary():
    from types import SimpleNamespace

    from pipelines.job.parse import ParseInputs
    from pipelines.job.progress import summary
    from pipelines.parse_replays import ParseConfig
    from pipelines.pokemon.refeaturize import RefeaturizeConfig

    for cls in (ParseConfig, RefeaturizeConfig):
        assert "in MiB (2**20 bytes)" in field_help(cls)["shard_size_mb"]
    slp = ParseConfig.tiny(source="slp", shard_size_mb=3)
    assert ParseInputs(slp.make_source(), shard_size_mb=slp.shard_size_mb).shard_size_bytes == 3 * 2**20
    files = [SimpleNamespace(bytes=3 * 2**20), SimpleNamespace(bytes=2**19)]
    counts = SimpleNamespace(inputs=2, written=2, filtered={}, quarantined={}, trajectories=2, rows=10)
    manifest = SimpleNamespace(counts=counts, files=files, schema_name="melee_frames", dataset="d", version="v")
    logs: list[str] = []
    summary(SimpleNamespace(manifest=manifest, reused=False, uri="u"), slp.parser, 1.0, logs.append)
    assert "2 games, 10 frames in 2 shards (3.5 MiB)" in "\n".join(logs)  # 3.67 were it 10**6 bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class FastOptions:
    """Attributes:
        speed: how fast.
    """

    speed: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlowOptions:
    """Attributes:
        delay_s: how slow.
    """

    delay_s: float = 1.0


def _modes() -> dict[str, type]:
    return {"fast": FastOptions, "slow": SlowOptions}


@dataclasses.dataclass(frozen=True, kw_only=True)
class FactoryChosenConfig:
    """Attributes:
        mode: which options.
        options: the mode's options.
    """

    mode: str = dataclasses.field(default_factory=lambda: "slow")
    options: object = chosen_section("mode", _modes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequiredChosenConfig:
    """Attributes:
        mode: which options.
        options: the mode's options.
    """

    mode: str
    options: object = chosen_section("mode", _modes)


def test_a_chosen_section_follows_its_choosers_default_factory():
    assert nest(FactoryChosenConfig, {"delay_s": 2.5}) == {"options": SlowOptions(delay_s=2.5)}
    with pytest.raises(ValueError, match="--speed is an option of --mode fast, not slow"):
        nest(FactoryChosenConfig, {"speed": 3})
    assert nest(FactoryChosenConfig, {"mode": "fast", "speed": 3}) == {"mode": "fast",
                                                                         "options": FastOptions(speed=3)}


def test_a_chosen_section_of_a_required_chooser_needs_it_named():
    with pytest.raises(ValueError, match=r"--speed need --mode \(one of \['fast', 'slow'\]\)"):
        nest(RequiredChosenConfig, {"speed": 3})
    assert nest(RequiredChosenConfig, {"mode": "fast", "speed": 3})["options"] == FastOptions(speed=3)
