"""``python -m kiln.exec.rpc_server``: start an RPC server (TVM's ``tvm.exec.rpc_server``).

It binds 127.0.0.1 unless ``--host`` says otherwise, prints ``bind to HOST:PORT`` on stderr,
and serves until interrupted. ``--init-module`` (kiln) imports a Python module or runs a
``.py`` file first, e.g. to register global functions clients call.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import runpy
import signal
import sys
import threading

from kiln.rpc.server import Server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="the host IP address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9090, help="the first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="the end of the port range")
    parser.add_argument("--through-proxy", dest="through_proxy", action="store_true",
                        help="serve through an RPC proxy: --host and --port are the proxy's")
    parser.add_argument("--tracker", help="the tracker's address host:port; registers the "
                        "server there under --key")
    parser.add_argument("--key", default="", help="the key the server is matched by")
    parser.add_argument("--load-library", help="shared libraries to load first, ':'-separated")
    parser.add_argument("--custom-addr", help="the address the tracker tells clients")
    parser.add_argument("--silent", action="store_true", help="log errors only")
    parser.add_argument("--no-fork", action="store_true",
                        help="accepted for TVM compatibility: kiln serves sessions on threads")
    parser.add_argument("--init-module", action="append", default=[],
                        help="(kiln) a Python module name or .py file to run first")
    parser.add_argument("--codec", default="v0.16", choices=["v0.16", "ffi"],
                        help="(kiln) the clients' argument encoding: v0.16 (TVM <= 0.20, "
                        "default) or ffi (apache-tvm >= 0.21)")
    parser.add_argument("--read-timeout", type=float, default=30.0,
                        help="(kiln) seconds a read inside a packet may wait (default 30)")


def run(args: argparse.Namespace) -> int:
    """Start the server described by ``args`` and serve until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.ERROR if args.silent else logging.INFO,
                        format="%(levelname)s %(message)s", stream=sys.stderr)
    for name in args.init_module:
        if name.endswith(".py"):
            runpy.run_path(name)
        else:
            importlib.import_module(name)
    tracker = None
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        tracker = (host, int(port))
    server = Server(args.host, args.port, args.port_end, is_proxy=args.through_proxy,
                    tracker_addr=tracker, key=args.key,
                    load_library=args.load_library, custom_addr=args.custom_addr,
                    silent=args.silent, read_timeout=args.read_timeout, codec=args.codec)
    if args.through_proxy:
        print(f"serving through the proxy at {args.host}:{server.port}", file=sys.stderr,
              flush=True)
    else:
        print(f"bind to {args.host}:{server.port}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_server",
                                     description="Start a TVM-protocol RPC server.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.tracker and not args.key:
        parser.error("--tracker needs --key")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
