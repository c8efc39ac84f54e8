"""``python -m kiln.exec.rpc_tracker``: start an RPC tracker (TVM's ``tvm.exec.rpc_tracker``).

Binds 127.0.0.1 unless ``--host`` says otherwise and prints ``bind to HOST:PORT`` on stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from kiln.rpc.tracker import Tracker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the host IP address to bind")
    parser.add_argument("--port", type=int, default=9190, help="the first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="the end of the port range")
    parser.add_argument("--silent", action="store_true", help="print nothing")


def run(args: argparse.Namespace) -> int:
    """Start the tracker described by ``args`` and serve until SIGINT/SIGTERM."""
    tracker = Tracker(args.host, args.port, args.port_end, silent=args.silent)
    print(f"bind to {args.host}:{tracker.port}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    tracker.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_tracker",
                                     description="Start a TVM-protocol RPC tracker.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
