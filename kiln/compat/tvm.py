"""``python -m kiln.compat.tvm [--shadow-tvm] script.py [args...]``: run a TVM script on kiln.

Also ``python -m kiln.compat.tvm -m package.module [args...]``. The script runs as
``__main__`` with ``import tvm`` resolving to kiln (see :mod:`kiln.compat`).
"""

from __future__ import annotations

import runpy
import sys

from kiln.compat import install_tvm_alias

USAGE = "usage: python -m kiln.compat.tvm [--shadow-tvm] (script.py | -m module) [args ...]"


def main(argv: list[str]) -> int:
    """Install the alias and run the script or module named in ``argv``."""
    shadow = None
    if argv and argv[0] == "--shadow-tvm":
        shadow, argv = True, argv[1:]
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr)
        return 2
    install_tvm_alias(shadow=shadow)
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
