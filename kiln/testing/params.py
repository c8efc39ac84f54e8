"""TVM's pytest parametrization helpers: targets, parameters and cached fixtures.

Entry points: :func:`parametrize_targets`, :func:`exclude_targets`, :func:`known_failing_targets`,
:func:`parameter`, :func:`parameters`, :func:`fixture`. They only record intent on the test
function or fixture; :mod:`kiln.testing.plugin` turns it into pytest parametrization.
"""

from __future__ import annotations

import copy
import functools
import itertools
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pytest

__all__ = ["parametrize_targets", "exclude_targets", "known_failing_targets", "parameter",
           "parameters", "fixture"]


def _target_list(args: tuple, what: str) -> list[str]:
    if not args or not all(isinstance(a, str) for a in args):
        raise TypeError(f"{what} takes target strings, e.g. {what}('llvm', 'c')")
    return list(args)


def parametrize_targets(*args: Any) -> Any:
    """Run a test once per target: ``@parametrize_targets`` alone uses the enabled targets,
    ``@parametrize_targets("llvm", "cuda")`` names them (ones this machine lacks are skipped)."""
    if len(args) == 1 and callable(args[0]):
        return args[0]  # the plugin parametrizes every test taking ``target`` by default
    targets = _target_list(args, "parametrize_targets")

    def wrapper(func: Callable) -> Callable:
        func.tvm_parametrize_targets = targets
        return func

    return wrapper


def exclude_targets(*args: str) -> Callable:
    """Leave the named targets out of a test's automatic target parametrization."""
    targets = _target_list(args, "exclude_targets")

    def wrapper(func: Callable) -> Callable:
        func.tvm_excluded_targets = [*getattr(func, "tvm_excluded_targets", []), *targets]
        return func

    return wrapper


def known_failing_targets(*args: str) -> Callable:
    """Mark a test as expected to fail (xfail) on the named targets."""
    targets = _target_list(args, "known_failing_targets")

    def wrapper(func: Callable) -> Callable:
        func.tvm_known_failing_targets = [*getattr(func, "tvm_known_failing_targets", []),
                                          *targets]
        return func

    return wrapper


def parameter(*values: Any, ids: Any = None, by_dict: dict | None = None) -> Any:
    """A fixture taking each of ``values`` in turn (or ``by_dict``'s values, its keys as ids).

    Example
    -------
    >>> import kiln.testing
    >>> shape = kiln.testing.parameter((1, 3), (2, 4))   # at module level of a test file
    """
    if by_dict is not None:
        if values or ids is not None:
            raise TypeError("parameter() takes either values (and ids) or by_dict, not both")
        ids, values = list(by_dict), tuple(by_dict.values())
    if not values:
        raise TypeError("parameter() needs at least one value")

    @pytest.fixture(params=list(values), ids=ids)
    def as_fixture(request):
        return request.param

    return as_fixture


_group_counter = itertools.count()


def parameters(*value_sets: Sequence[Any], ids: Any = None) -> tuple:
    """Fixtures that vary together: ``a, b = parameters((1, "x"), (2, "y"))`` gives
    (a, b) = (1, "x") then (2, "y"), never the cross product."""
    if not value_sets:
        raise TypeError("parameters() needs at least one value set")
    width = len(value_sets[0])
    if any(len(v) != width for v in value_sets):
        raise ValueError(f"every value set passed to parameters() must have {width} values")
    group = next(_group_counter)
    fixtures = []
    for index in range(width):
        def as_fixture(request):
            return request.param

        # The plugin finds these attributes and parametrizes the whole group at once; they go
        # on the plain function, which is what pytest's fixture definition keeps.
        as_fixture.parametrize_group = group
        as_fixture.parametrize_index = index
        as_fixture.parametrize_values = [tuple(v) for v in value_sets]
        as_fixture.parametrize_ids = ids
        fixtures.append(pytest.fixture(as_fixture))
    return tuple(fixtures)


def fixture(func: Callable | None = None, *, cache_return_value: bool = False) -> Any:
    """``pytest.fixture``; with ``cache_return_value=True`` the value is computed once per
    distinct set of argument values and every test gets its own deep copy."""
    def wrapper(f: Callable) -> Any:
        if not cache_return_value:
            return pytest.fixture(f)
        cache: dict[bytes, Any] = {}

        @functools.wraps(f)
        def cached(*args, **kwargs):
            try:
                key = pickle.dumps((args, sorted(kwargs.items())))
            except (pickle.PicklingError, TypeError, AttributeError):
                return f(*args, **kwargs)  # arguments that cannot be keyed are not cached
            if key not in cache:
                cache[key] = f(*args, **kwargs)
            return copy.deepcopy(cache[key])

        return pytest.fixture(cached)

    return wrapper if func is None else wrapper(func)
