"""Run code written for Apache TVM unchanged: make ``import tvm`` resolve to kiln.

Entry points: :func:`install_tvm_alias` (notebooks, scripts), ``python -m kiln.compat.tvm
script.py`` (no edit at all) and the pytest plugin ``-p kiln.compat.pytest_plugin``.

``tvm.X.Y`` is the very module object ``kiln.X.Y`` (or the module kiln's lazy table names for
``X``, e.g. ``tvm.error`` is ``kiln.runtime.error``), so ``isinstance`` holds across both names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

from kiln.runtime.error import TVMError

__all__ = ["install_tvm_alias", "uninstall_tvm_alias", "tvm_alias_installed", "ShadowingError"]

ALIAS = "tvm"
# Set to 1 to let kiln shadow an installed apache-tvm without passing ``shadow=True``.
SHADOW_ENV = "KILN_SHADOW_TVM"


class ShadowingError(TVMError):
    """The real apache-tvm is importable and the caller did not ask kiln to shadow it."""


def resolve_kiln_module(tvm_name: str) -> types.ModuleType | None:
    """The kiln module that TVM's module ``tvm_name`` (``"tvm.relay.testing"``) stands for.

    Returns None when kiln has no such module.
    """
    parts = tvm_name.split(".")
    if parts[0] != ALIAS:
        raise ValueError(f"{tvm_name!r} is not a name under {ALIAS!r}")
    module = importlib.import_module("kiln")
    for part in parts[1:]:
        # A real submodule file wins; otherwise a lazy attribute naming a module (tvm.error).
        candidate = f"{module.__name__}.{part}"
        try:
            module = importlib.import_module(candidate)
            continue
        except ModuleNotFoundError as err:
            if err.name != candidate:
                raise  # the module exists but one of its own imports is missing
        try:
            value = getattr(module, part, None)
        except ModuleNotFoundError as err:
            # A lazy table naming a module this checkout lacks is the same as no module.
            if err.name and tvm_name.replace(ALIAS, "kiln", 1).startswith(err.name):
                return None
            raise
        if not isinstance(value, types.ModuleType):
            return None
        module = value
    return module


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system an already imported kiln module instead of a fresh copy."""

    def __init__(self, module: types.ModuleType):
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        # The import system stamps the alias spec on the module; kiln's own spec stays its own.
        module.__spec__ = self.spec


class _TvmAliasFinder(importlib.abc.MetaPathFinder):
    """Meta path finder answering every ``tvm`` / ``tvm.*`` import with kiln's module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        module = resolve_kiln_module(fullname)
        if module is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: kiln has no counterpart of TVM's {fullname} "
                "(see docs/porting_from_tvm.md for what kiln provides)", name=fullname)
        is_package = hasattr(module, "__path__")
        spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(module),
                                              is_package=is_package)
        if is_package:
            spec.submodule_search_locations = list(module.__path__)
        return spec


_FINDER = _TvmAliasFinder()


def tvm_alias_installed() -> bool:
    """Whether ``import tvm`` currently resolves to kiln."""
    import kiln

    return sys.modules.get(ALIAS) is kiln


def _real_tvm_location() -> str | None:
    """Where a real (non-kiln) ``tvm`` package would be imported from, if anywhere."""
    existing = sys.modules.get(ALIAS)
    if existing is not None:
        return getattr(existing, "__file__", None) or repr(existing)
    spec = importlib.machinery.PathFinder.find_spec(ALIAS)
    if spec is None:
        return None
    return spec.origin or str(list(spec.submodule_search_locations or []))


def install_tvm_alias(shadow: bool | None = None) -> types.ModuleType:
    """Make ``import tvm`` and ``import tvm.<sub>`` give kiln's modules; returns ``kiln``.

    Parameters
    ----------
    shadow : bool, optional
        Shadow a real apache-tvm that is importable in this environment. Defaults to the
        ``KILN_SHADOW_TVM`` environment variable; without it, finding apache-tvm raises
        :class:`ShadowingError` rather than silently changing which library runs.

    Example
    -------
    >>> import kiln.compat
    >>> tvm = kiln.compat.install_tvm_alias()
    >>> import tvm.relay
    >>> tvm.relay is __import__("kiln").relay
    True
    """
    import kiln

    if tvm_alias_installed():
        return kiln
    if shadow is None:
        shadow = os.environ.get(SHADOW_ENV, "") not in ("", "0")
    location = _real_tvm_location()
    if location is not None and not shadow:
        raise ShadowingError(
            f"apache-tvm is importable here ({location}); refusing to make 'import tvm' "
            f"resolve to kiln. Pass shadow=True, set {SHADOW_ENV}=1, or use "
            "'python -m kiln.compat.tvm --shadow-tvm' to shadow it on purpose.")
    # Drop a real tvm already imported, so no module of the two libraries mixes with the other.
    for name in [n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _FINDER)
    sys.modules[ALIAS] = kiln
    return kiln


def uninstall_tvm_alias() -> None:
    """Undo :func:`install_tvm_alias`: ``tvm`` names are forgotten; kiln stays imported."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + ".")]:
        del sys.modules[name]
