"""``relay.op.annotation`` and the other internal ops; see :mod:`.annotation`."""

from __future__ import annotations

from kiln.relay.op.annotation.annotation import *  # noqa: F403
from kiln.relay.op.annotation.annotation import __all__  # noqa: F401
