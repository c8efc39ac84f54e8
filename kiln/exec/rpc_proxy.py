"""``python -m kiln.exec.rpc_proxy``: start an RPC proxy (TVM's ``tvm.exec.rpc_proxy``).

Servers that cannot be reached directly (``python -m kiln.exec.rpc_server --through-proxy
--host PROXY --port PORT --key KEY``) connect out to the proxy; clients connect to the proxy
with the same key (``rpc.connect(PROXY, PORT, key=KEY)``) and are paired with a waiting server.
With ``--tracker``, the proxy registers its waiting servers there. Binds 127.0.0.1 unless
``--host`` says otherwise and prints ``bind to HOST:PORT`` on stderr. TCP only: TVM's
websocket front end (``--web-port``, ``--example-rpc``) is refused.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kiln.rpc.proxy import Proxy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="the host IP address to bind")
    parser.add_argument("--port", type=int, default=9090, help="the first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="the end of the port range")
    parser.add_argument("--web-port", type=int, default=0,
                        help="TVM's websocket port: kiln supports only 0 (none)")
    parser.add_argument("--example-rpc", action="store_true",
                        help="TVM's browser example pages: not supported by kiln")
    parser.add_argument("--tracker", default="", help="register waiting servers with the "
                        "tracker at host:port")
    parser.add_argument("--timeout-client", type=float, default=600,
                        help="(kiln) seconds a client waits for a server (default 600)")
    parser.add_argument("--timeout-server", type=float, default=600,
                        help="(kiln) seconds a server waits for a client before it is asked "
                        "to offer again (default 600)")
    parser.add_argument("--silent", action="store_true", help="log errors only")


def run(args: argparse.Namespace) -> int:
    """Start the proxy described by ``args`` and serve until SIGINT/SIGTERM."""
    logging.basicConfig(level=logging.ERROR if args.silent else logging.INFO,
                        format="%(levelname)s %(message)s", stream=sys.stderr)
    if args.example_rpc:
        print("kiln's RPC proxy has no browser example front end (--example-rpc)",
              file=sys.stderr)
        return 2
    tracker = None
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        tracker = (host, int(port))
    proxy = Proxy(args.host, args.port, args.port_end, web_port=args.web_port,
                  timeout_client=args.timeout_client, timeout_server=args.timeout_server,
                  tracker_addr=tracker)
    print(f"bind to {args.host}:{proxy.port}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    proxy.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.exec.rpc_proxy",
                                     description="Start a TVM-protocol RPC proxy.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
