"""The mixed-quality recipe's bookkeeping (``benchmarks/mixed_quality_data.py``): each player's decisions read from a
real generated version, and the recipe's checks on a composition."""

from __future__ import annotations

from benchmarks.mixed_quality_data import check_recipe, composition, decisions_by_side


def test_decisions_are_counted_per_player_of_a_generated_version(tiny_generated):
    import pyarrow.compute as pc

    from shards_schema.reader import open_version

    _, published, _ = tiny_generated
    version = open_version(published.path)
    by_side = decisions_by_side(version)
    actions = [version.read_table(f.path, ["action"]).column("action") for f in version.manifest.files]
    assert sum(by_side.values()) == sum(pc.sum(pc.greater_equal(a, 0)).as_py() for a in actions)
    config = version.manifest.config
    rows = {r["player"]: r for r in composition([(config, by_side)])}
    assert set(rows) == {config["p1"], config["p2"]}  # the tiny preset's heuristic vs random
    assert rows[config["p1"]]["decisions"] == by_side["p1"]
    assert abs(sum(r["share"] for r in rows.values()) - 1.0) < 1e-3


def test_the_recipe_wants_three_players_none_over_half_and_the_weakest_a_quarter():
    def rows(**shares):
        return [{"player": p, "decisions": int(s * 1000), "share": s} for p, s in shares.items()]

    assert check_recipe(rows(search=0.36, heuristic=0.34, random=0.30), "random") == []
    [problem] = check_recipe(rows(search=0.55, heuristic=0.25, random=0.20), "heuristic")
    assert "search holds 55.0%" in problem
    problems = check_recipe(rows(search=0.5, heuristic=0.3, random=0.2), "random")
    assert problems == ["the weakest player, random, holds 20.0% (at least 25%)"]
    assert any("three skill levels" in p for p in check_recipe(rows(search=0.5, random=0.5), "random"))
