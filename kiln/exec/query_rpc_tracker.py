"""``python -m kiln.exec.query_rpc_tracker``: print a tracker's servers and queues (TVM's
``tvm.exec.query_rpc_tracker``); defaults from ``TVM_TRACKER_HOST``/``TVM_TRACKER_PORT``."""

from __future__ import annotations

import argparse
import os
import sys

from kiln.rpc.tracker import connect_tracker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=os.environ.get("TVM_TRACKER_HOST", "127.0.0.1"),
                        help="the tracker's host")
    parser.add_argument("--port", type=int,
                        default=int(os.environ.get("TVM_TRACKER_PORT", "9190")),
                        help="the tracker's port")


def run(args: argparse.Namespace) -> int:
    """Print the summary of the tracker at ``args.host:args.port``."""
    session = connect_tracker(args.host, args.port)
    print(f"Tracker address {args.host}:{args.port}\n")
    print(session.text_summary())
    session.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.query_rpc_tracker",
                                     description="Show an RPC tracker's servers and queues.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
