"""TopHub: pre-tuned configs shipped with kiln (TVM's ``autotvm.tophub``), read locally.

Entry points: :func:`context` (an ``ApplyHistoryBest`` over the packaged records of a
target), :func:`check_backend`, :data:`PACKAGE_VERSION`.

TVM downloads ``{backend}_{version}.log`` from the TopHub repository into
``~/.tvm/tophub``. kiln ships its packages inside the wheel (``kiln/autotvm/tophub_packages/``) and
never downloads: ``TOPHUB_LOCATION`` may name another local folder holding packages of the
same names, or ``NONE`` to turn TopHub off. As in TVM, a target picks one package, by its
``-device``, then its keys, then its kind; records match workloads by target keys.

Unlike TVM, ``relay.build`` does not enter this context by itself (kiln's untuned
schedules are its modelled defaults, and importing AutoTVM changes no build):

>>> from kiln import autotvm
>>> with autotvm.tophub.context("llvm"):       # doctest: +SKIP
...     lib = relay.build(mod, target="llvm", params=params)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from kiln.autotvm.task.dispatcher import ApplyHistoryBest
from kiln.runtime.error import TVMError

__all__ = ["context", "check_backend", "package_path", "PACKAGE_VERSION",
           "AUTOTVM_TOPHUB_LOC_VAR", "AUTOTVM_TOPHUB_NONE_LOC", "AUTOTVM_TOPHUB_ROOT_PATH"]

# environment variable naming a folder of packages (or NONE), as TVM's
AUTOTVM_TOPHUB_LOC_VAR = "TOPHUB_LOCATION"
AUTOTVM_TOPHUB_NONE_LOC = "NONE"
# where kiln's packages are: in the package itself
AUTOTVM_TOPHUB_ROOT_PATH = Path(__file__).resolve().parent / "tophub_packages"

# backend -> version of its package (kiln's own numbering: its records are kiln's templates)
PACKAGE_VERSION = {"llvm": "v0.01"}



def _location() -> Path | None:
    location = os.environ.get(AUTOTVM_TOPHUB_LOC_VAR)
    if location is None:
        return AUTOTVM_TOPHUB_ROOT_PATH
    if location == AUTOTVM_TOPHUB_NONE_LOC:
        return None
    if "://" in location:
        raise TVMError(f"{AUTOTVM_TOPHUB_LOC_VAR}={location!r}: kiln reads TopHub packages "
                       "from a local folder and never downloads; name a folder or NONE")
    return Path(location)


def package_path(backend: str) -> Path:
    """The file of ``backend``'s package (it may be missing from a ``TOPHUB_LOCATION``)."""
    root = _location() or AUTOTVM_TOPHUB_ROOT_PATH
    return root / f"{backend}_{PACKAGE_VERSION[backend]}.log"


def check_backend(tophub_location: Any, backend: str) -> bool:
    """Whether ``backend``'s package is present (TVM downloads it here; kiln only looks)."""
    return backend in PACKAGE_VERSION and package_path(backend).is_file()


def _backends(target: Any) -> list[str]:
    """A target's candidate package names, in TVM's order: device, keys, kind (kiln's host
    ``c`` target builds the same x86 templates as ``llvm``; a Cortex-M one does not)."""
    device = target.attrs.get("device", "")
    kind = target.kind.name
    if kind == "c" and "arm_cpu" not in target.keys:
        kind = "llvm"
    return ([device] if device else []) + list(target.keys) + [kind]


def context(target: Any, extra_files: list | None = None) -> Any:
    """An ``ApplyHistoryBest`` of the packaged records for ``target`` (a target, its string,
    or a list of them) and ``extra_files``; a do-nothing context when ``TOPHUB_LOCATION``
    is ``NONE``."""
    from kiln.target import Target

    location = _location()
    if location is None:
        return contextlib.nullcontext()
    best = ApplyHistoryBest([])
    targets = target if isinstance(target, list | tuple) else [target]
    for tgt in targets:
        tgt = Target(tgt) if isinstance(tgt, str) else tgt
        for backend in _backends(tgt):
            if check_backend(location, backend):
                best.load(package_path(backend))
                break  # one package per target: another's configs may not fit its templates
    for filename in extra_files or []:
        best.load(filename)
    return best
