"""pytest plugin with TVM's test idiom (``pytest_plugins = ["tvm.testing.plugin"]``).

Tests taking a ``target`` argument run once per enabled target (``TVM_TEST_TARGETS`` overrides,
``;``-separated); ``dev`` is that target's device. Targets named by
``parametrize_targets`` that this machine lacks are skipped, ``known_failing_targets`` xfail,
and ``parameters`` groups vary together.
"""

from __future__ import annotations

import os

import pytest

from kiln.testing.features import Feature


def pytest_configure(config):
    """Register the markers TVM's tests use, so ``--strict-markers`` accepts them."""
    for feature in Feature._all_features.values():
        config.addinivalue_line("markers", f"{feature.name}: test uses {feature.long_name}")


def _default_targets() -> list[str]:
    from kiln.testing import enabled_targets

    env = os.environ.get("TVM_TEST_TARGETS", "").strip()
    if env:
        return [t.strip() for t in env.split(";") if t.strip()]
    return [target for target, _ in enabled_targets()]


def _target_param(target: str, known_failing: list[str]):
    from kiln.testing import device_enabled

    kind = target.split()[0]
    marks = []
    if not device_enabled(target):
        marks.append(pytest.mark.skip(reason=f"No device exists for target {kind}"))
    if kind in known_failing or target in known_failing:
        marks.append(pytest.mark.xfail(reason=f"Known failing test for target {kind}"))
    return pytest.param(target, marks=marks, id=target)


def _parametrize_target(metafunc) -> None:
    if "target" not in metafunc.fixturenames:
        return
    marks = metafunc.definition.iter_markers("parametrize")
    if any("target" in m.args[0].split(",") for m in marks):
        return  # the test parametrizes target itself
    func = metafunc.function
    targets = getattr(func, "tvm_parametrize_targets", None) or _default_targets()
    excluded = getattr(func, "tvm_excluded_targets", [])
    failing = getattr(func, "tvm_known_failing_targets", [])
    params = [_target_param(t, failing) for t in targets if t.split()[0] not in excluded]
    metafunc.parametrize("target", params, scope="function")


def _parametrize_groups(metafunc) -> None:
    groups: dict[int, dict[int, str]] = {}
    info = {}
    for name, defs in metafunc.definition._fixtureinfo.name2fixturedefs.items():
        func = getattr(defs[-1], "func", None)
        group = getattr(func, "parametrize_group", None)
        if group is None or name not in metafunc.fixturenames:
            continue
        groups.setdefault(group, {})[func.parametrize_index] = name
        info[group] = func
    for group, names_by_index in groups.items():
        func = info[group]
        indices = sorted(names_by_index)
        names = [names_by_index[i] for i in indices]
        values = [tuple(vs[i] for i in indices) for vs in func.parametrize_values]
        if len(names) == 1:
            values = [v[0] for v in values]
        metafunc.parametrize(names, values, indirect=True, ids=func.parametrize_ids)


def pytest_generate_tests(metafunc):
    """Parametrize ``target`` and correlated ``parameters`` groups."""
    _parametrize_target(metafunc)
    _parametrize_groups(metafunc)


@pytest.fixture
def dev(target):
    """The device of the test's ``target``."""
    from kiln.runtime.device import device

    return device(target.split()[0])
