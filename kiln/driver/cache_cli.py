"""``kiln cache info|evict|clear``: the build cache on disk (``KILN_CACHE_DIR``).

Entry point: :func:`add_cache_parser`. ``info`` prints the cache's folder, size, cap
(``KILN_CACHE_MAX_MB``) and its folders' sizes; ``evict``, when the cache is over the cap
(``--max-mb`` for another), removes least recently used entries now until it is at 90% of the
cap (:data:`~kiln.runtime.disk_cache.LOW_WATER`; entries used in the last 5 minutes stay);
``clear`` removes every entry.
See :mod:`kiln.runtime.disk_cache`.
"""

from __future__ import annotations

import math
from typing import Any

from kiln.runtime import disk_cache

__all__ = ["add_cache_parser"]


def _megabytes(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


def _cmd_info(args: Any) -> int:
    info = disk_cache.cache_info()
    cap = info["max_bytes"]
    print(f"cache   {info['path']}")
    print(f"size    {_megabytes(info['bytes'])} in {info['entries']} entries")
    print(f"cap     {_megabytes(cap) if cap > 0 else 'none'} (KILN_CACHE_MAX_MB)")
    for name, row in info["folders"].items():
        print(f"  {name:<15} {_megabytes(row['bytes']):>12} {row['entries']:>7} entries")
    return 0


def _cmd_evict(args: Any) -> int:
    from kiln.driver.cli import CLIError

    if args.max_mb is not None and not (math.isfinite(args.max_mb) and args.max_mb > 0):
        raise CLIError(f"--max-mb must be a positive number of megabytes, got {args.max_mb}")
    # at least a byte: a cap of 0 means "no cap", which evicts nothing
    limit = None if args.max_mb is None else max(1, int(args.max_mb * (1 << 20)))
    removed = disk_cache.evict(limit, wait=True)
    print(f"evicted {_megabytes(removed)}")
    return 0


def _cmd_clear(args: Any) -> int:
    print(f"removed {_megabytes(disk_cache.clear())}")
    return 0


def add_cache_parser(sub: Any) -> None:
    """The ``cache`` subcommand."""
    cache = sub.add_parser("cache", help="show, trim or clear the build cache",
                           description=__doc__.split("\n\n")[0])
    actions = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    actions.add_parser("info", help="the cache's folder, size and cap").set_defaults(
        func=_cmd_info)
    p = actions.add_parser(
        "evict", help=f"when over the cap, remove least recently used entries until the cache "
        f"is at {disk_cache.LOW_WATER * 100:.0f}%% of it (entries used in the last "
        f"{disk_cache.GRACE_SECONDS / 60:.0f} minutes stay)")
    p.add_argument("--max-mb", type=float, default=None,
                   help="cap in megabytes for this eviction (default KILN_CACHE_MAX_MB)")
    p.set_defaults(func=_cmd_evict)
    actions.add_parser("clear", help="remove every entry").set_defaults(func=_cmd_clear)
