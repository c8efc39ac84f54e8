"""kiln.topi: tensor operator computes and schedules (TVM's ``tvm.topi``).

Entry points: the elementwise, broadcast, reduction and transform computes at the top level
(``topi.exp``, ``topi.add``, ``topi.sum``, ``topi.reshape`` …), neural-network computes in
:mod:`kiln.topi.nn`, image resizing in :mod:`kiln.topi.image`, and schedules per target key in
:mod:`kiln.topi.generic`, :mod:`kiln.topi.x86` and :mod:`kiln.topi.arm_cpu`.

Example
-------
>>> import numpy as np
>>> import kiln
>>> from kiln import te, topi
>>> A = te.placeholder((4,), name="A")
>>> B = topi.add(topi.exp(A), 1.0)
>>> s = topi.generic.schedule_injective([B])
>>> f = kiln.build(s, [A, B], target="c", name="exp_plus_one")
>>> a = kiln.nd.array(np.zeros(4, "float32")); b = kiln.nd.empty((4,), "float32")
>>> f["exp_plus_one"](a, b); b.numpy().tolist()
[2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

from kiln._lazy import attach
from kiln.topi import arm_cpu, generic, image, nn, tag, utils, x86  # noqa: F401,E402,I001
from kiln.topi.broadcast import *  # noqa: F403
from kiln.topi.math import *  # noqa: F403
from kiln.topi.reduction import *  # noqa: F403
from kiln.topi.scatter import *  # noqa: F403
from kiln.topi.sort import *  # noqa: F403
from kiln.topi.transform import *  # noqa: F403

# tvm.topi.testing (NumPy references) loads on first use: kernels never need it.
__getattr__, __dir__ = attach(__name__, {"testing": "kiln.topi.testing"})
