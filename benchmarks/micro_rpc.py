"""Host-driven microTVM over the serial session to QEMU (mps2-an386, Cortex-M4, -icount).

Prints one table:

* link throughput: bytes/s of ``copyfrom`` (host -> device) and ``numpy()`` (device -> host)
  of a uint8 tensor through RPC, the session layer, the framing and QEMU's UART;
* the cost of one argument-less call and of one ``time_evaluator`` call (number=1, repeat=1):
  host wall time per call;
* the on-device timer against the instruction count: a dense kernel timed on the device
  (``runtime.RPCTimeEvaluator`` with the SysTick platform timer) next to the same model's
  standalone run, whose instruction count QEMU's -icount makes exact.

Usage::

    python benchmarks/micro_rpc.py                 # about a minute
    python benchmarks/micro_rpc.py --nbytes 32768 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.micro import Session, create_local_graph_executor
from kiln.micro.board import StandaloneProject, get_board
from kiln.micro.board.qemu import INSTRUCTIONS_PER_TICK
from kiln.micro.transport import SubprocessTransport, TransportTimeouts
from kiln.relay.backend import Executor, Runtime

BOARD = "qemu-cortex-m4"


def build_model(out: Path) -> tuple[Path, object]:
    """A 64x64 dense + relu for the graph executor, as a system library."""
    x = relay.var("x", shape=(1, 64), dtype="float32")
    w = relay.var("w", shape=(64, 64), dtype="float32")
    func = relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w)))
    params = {"w": np.random.default_rng(0).random((64, 64), "float32")}
    runtime = Runtime("crt", {"system-lib": True})
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        factory = relay.build(tvm.IRModule.from_expr(func), target=get_board(BOARD).target,
                              runtime=runtime, executor=Executor("graph"), params=params)
    mlf = out / "model.tar"
    tvm.micro.export_model_library_format(factory, mlf)
    return mlf, factory


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nbytes", type=int, default=16384, help="bytes per copy")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="kiln-micro-rpc-bench-"))
    mlf, factory = build_model(out)
    project = StandaloneProject(mlf, BOARD, build_dir=out / "rpc", execution="host-driven")
    program = project.build()
    rows = []
    transport = SubprocessTransport(project.board.qemu_command(program),
                                    TransportTimeouts(1.0, 20.0, 60.0), cwd=str(out))
    with Session(transport) as session:
        data = np.random.default_rng(1).integers(0, 256, args.nbytes, dtype="uint8")
        remote = tvm.nd.empty((args.nbytes,), "uint8", session.device)
        up, down = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            remote.copyfrom(data)
            up.append(args.nbytes / (time.perf_counter() - start))
            start = time.perf_counter()
            back = remote.numpy()
            down.append(args.nbytes / (time.perf_counter() - start))
            assert np.array_equal(back, data)
        rows.append(("host -> device copy", f"{statistics.median(up) / 1e3:.1f} KB/s"))
        rows.append(("device -> host copy", f"{statistics.median(down) / 1e3:.1f} KB/s"))
        # the fixed cost of one packet each way: an argument-less call (28 B out, 40 B back)
        tiny = session.get_function("tvm.rpc.server.GetCRTMaxPacketSize")
        walls = []
        for _ in range(5 * args.rounds):
            start = time.perf_counter()
            tiny()
            walls.append(time.perf_counter() - start)
        rows.append(("one argument-less call (host wall)",
                     f"{statistics.median(walls) * 1e3:.2f} ms"))

        lib = session.get_system_lib()
        runner = create_local_graph_executor(factory.get_graph_json(), lib, session.device)
        runner.set_input(**factory.get_params())
        name = [n.func_name for n in runner.graph.nodes if n.op == "tvm_op"][0]
        _, arrays = runner._ops[0]
        kernel = lib.get_function(name)
        one = lib.time_evaluator(name, session.device, number=1, repeat=1)
        for label, call in (("one call of the kernel itself (host wall)", kernel),
                            ("one time_evaluator call (host wall)", one)):
            walls = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                call(*arrays)
                walls.append(time.perf_counter() - start)
            rows.append((label, f"{statistics.median(walls) * 1e3:.1f} ms"))
        timed = lib.time_evaluator(name, session.device, number=20, repeat=3)(*arrays)
        device_s = statistics.median(timed.results)

    standalone = StandaloneProject(mlf, BOARD, build_dir=out / "standalone")
    standalone.build()
    result = standalone.run([np.zeros((1, 64), "float32")], timeout=120)
    ticks_per_second = result.ticks_per_second
    implied = device_s * ticks_per_second * INSTRUCTIONS_PER_TICK
    rows.append((f"device timer: {name}", f"{device_s * 1e6:.1f} us (virtual) = "
                 f"{implied:,.0f} instructions at {INSTRUCTIONS_PER_TICK}/tick"))
    rows.append(("standalone run of the model (icount)",
                 f"{result.instructions:,} instructions, {result.seconds * 1e6:.1f} us"))
    width = max(len(r[0]) for r in rows)
    print(f"host-driven microTVM on {BOARD} (QEMU serial link, {args.nbytes} B copies)")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
