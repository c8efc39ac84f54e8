"""Config spaces: knob enumeration, index <-> config arithmetic, JSON form, fallbacks."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import TVMError
from kiln.autotvm.task.space import (
    ConfigEntity,
    ConfigSpace,
    FallbackConfigEntity,
    SplitEntity,
)


def _splits(n, parts, factors, tails):
    """Brute force: every ``[-1, f1, ...]`` whose inner product fits ``n``."""
    out = []
    for inner in itertools.product(factors, repeat=parts - 1):
        total = math.prod(inner)
        if total <= n and (tails or n % total == 0):
            out.append([-1, *inner])
    return sorted(out)


@given(st.integers(1, 96), st.integers(2, 3))
@settings(max_examples=40, deadline=None)
def test_split_policies_match_brute_force(n, parts):
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    pow2 = [2 ** k for k in range(8) if 2 ** k <= n]
    for policy, factors, tails in (("factors", divisors, False), ("power2", pow2, True),
                                   ("verbose", sorted(set(divisors) | set(pow2)), True)):
        cfg = ConfigSpace()
        cfg.define_split("s", n, policy=policy, num_outputs=parts)
        got = sorted(e.size for e in cfg.space_map["s"].entities)
        assert got == _splits(n, parts, factors, tails), policy


def test_split_filter_max_factor_and_candidate():
    cfg = ConfigSpace()
    cfg.define_split("a", 64, num_outputs=2, max_factor=8, filter=lambda e: e.size[-1] > 1)
    assert [e.size for e in cfg.space_map["a"].entities] == [[-1, 2], [-1, 4], [-1, 8]]
    cfg.define_split("b", 64, policy="candidate", num_outputs=2, candidate=[[-1, 3], [-1, 5]])
    assert [e.size for e in cfg.space_map["b"].entities] == [[-1, 3], [-1, 5]]


def test_index_is_mixed_radix_with_first_knob_least_significant():
    cfg = ConfigSpace()
    cfg.define_split("x", 8, num_outputs=2)          # 4 entities
    cfg.define_knob("k", [10, 20, 30])               # 3 entities
    cfg.define_reorder("r", [0, 1], policy="all")    # 2 entities
    assert len(cfg) == cfg.range_length == 24
    for index in range(24):
        knob = cfg.point2knob(index)
        assert knob == [index % 4, (index // 4) % 3, index // 12]
        assert cfg.knob2point(knob) == index
        config = cfg.get(index)
        assert config["x"].size == [-1, [1, 2, 4, 8][knob[0]]]
        assert config["k"].val == [10, 20, 30][knob[1]]
        assert config["r"].perm == [[0, 1], [1, 0]][knob[2]]
    with pytest.raises(TVMError, match="out of the space"):
        cfg.get(24)


def test_annotate_and_reorder_policies():
    cfg = ConfigSpace()
    cfg.define_annotate("a", [0, 1], policy="try_unroll_vec")
    anns = [e.anns for e in cfg.space_map["a"].entities]
    assert ["unroll", "vec"] in anns and ["none", "none"] in anns
    assert all(a.count("vec") <= 1 for a in anns)
    cfg.define_reorder("r", [0, 1, 2, 3], policy="interval_all", interval=(1, 3))
    assert sorted(e.perm for e in cfg.space_map["r"].entities) == [[0, 1, 2, 3], [0, 2, 1, 3]]
    with pytest.raises(TVMError, match="unknown policy"):
        cfg.define_annotate("b", [0], policy="sometimes")
    with pytest.raises(TVMError, match="unknown policy"):
        cfg.define_split("c", 8, policy="halves")


def test_multi_filter_counts_only_valid_indices():
    cfg = ConfigSpace()
    cfg.define_split("x", 16, num_outputs=2)
    cfg.define_split("y", 16, num_outputs=2)
    cfg.multi_filter(lambda e: e["x"].size[-1] * e["y"].size[-1] <= 16)
    brute = sum(1 for a in (1, 2, 4, 8, 16) for b in (1, 2, 4, 8, 16) if a * b <= 16)
    assert cfg.range_length == 25 and len(cfg) == brute
    assert not cfg.is_index_valid(cfg.knob2point([4, 4]))


def test_config_entity_json_round_trip():
    cfg = ConfigSpace()
    cfg.define_split("tile", 32, num_outputs=3)
    cfg.define_annotate("ann", [0, 1], policy="try_unroll")
    cfg.define_knob("unroll_kw", [True, False])
    config = cfg.get(cfg.range_length - 1)
    back = ConfigEntity.from_json_dict(config.to_json_dict())
    assert back == config and back.index == config.index
    assert back.to_json_dict() == config.to_json_dict()
    with pytest.raises(TVMError, match="unknown kind"):
        ConfigEntity.from_json_dict({"index": 0, "entity": [["t", "zz", [1]]]})
    with pytest.raises(TVMError, match="malformed"):
        ConfigEntity.from_json_dict({"entity": []})


def test_fallback_split_takes_largest_divisors_innermost_first():
    cfg = FallbackConfigEntity()
    cfg.define_split("tile", 96, num_outputs=3)
    assert cfg["tile"].size == [-1, 1, 1]  # the first entity until a default is set
    cfg.fallback_split("tile", [0, 5, 16])
    assert cfg["tile"].size == [-1, 3, 16]  # 96 = 2 * 3 * 16
    cfg["tile"] = SplitEntity([-1, 2, 8])
    cfg.define_split("tile", 96, num_outputs=3)  # defining again keeps the default
    assert cfg["tile"].size == [-1, 2, 8] and cfg.is_fallback
