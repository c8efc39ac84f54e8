"""kiln.target.x86.target_has_features: -mattr, -mcpu table, unknown features."""

import pytest

import kiln as tvm
from kiln.target.x86 import target_has_features


@pytest.mark.parametrize("target, feature, expected", [
    ("llvm -mcpu=haswell", "fma", True),          # Intel's manuals: Haswell has FMA3 and AVX2
    ("llvm -mcpu=bdver2", "fma", True),           # Piledriver: FMA3 without AVX2
    ("llvm -mcpu=bdver2", "avx2", False),
    ("llvm -mcpu=core-avx2", "avx2", True),
    ("llvm -mcpu=znver3", "avx512f", False),
    ("llvm -mcpu=znver4", "avx512vnni", True),
    ("llvm -mcpu=nehalem", "fma", False),
    ("llvm -mcpu=haswell -mattr=-fma", "fma", False),
    ("llvm -mcpu=nehalem -mattr=+sse4.2", "sse4.2", True),
    ("llvm -mcpu=nehalem -mattr=+avx512f", "avx2", True),    # AVX-512 brings AVX2 and FMA
    ("llvm -mcpu=nehalem -mattr=+avx512f", "fma", True),
    ("llvm -mcpu=nehalem -mattr=+avx512f,-avx2", "avx2", False),
])
def test_features_from_mattr_then_mcpu(target, feature, expected):
    assert target_has_features(feature, tvm.target.Target(target)) is expected


def test_a_feature_the_cpu_table_does_not_list_is_an_error_not_false():
    with pytest.raises(tvm.TVMError, match="'sse4.2'.*-mattr"):
        target_has_features("sse4.2", tvm.target.Target("llvm -mcpu=core-avx2"))
