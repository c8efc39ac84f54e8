"""VM dispatch overhead: nanoseconds per instruction for loops of cheap instructions.

Run: ``python benchmarks/vm_dispatch.py [steps]``. Two hand-assembled programs walk a cons
list of ``steps`` cells (no kernels, no allocation), so the time is the interpreter's own:

- ``loop``: one frame; per cell GetTag, If, Move, GetField, LoadConsti, Goto (6 instructions);
- ``tail call``: per cell GetTag, LoadConsti, If, GetField, Invoke (a tail call reusing the
  frame) — 5 instructions, one of them a call.

A plain Python ``while`` loop walking the same list is printed for scale. Times are the best
of 3 in *thread CPU time* (``time.thread_time``), which a busy shared machine inflates much
less than wall time; still, compare the rows of one run.
"""

from __future__ import annotations

import sys
import time

import kiln
from kiln.runtime.container import ADT
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import GetField, GetTag, Goto, If, Invoke, LoadConsti, Move, Ret


def loop_program() -> Executable:
    main = VMFunction("main", ["list"], [
        LoadConsti(0, 1),
        Move(0, 3),
        GetTag(0, 2),            # loop head
        If(2, 1, 1, 2),
        Ret(3),
        Move(0, 3),
        GetField(0, 1, 0),
        LoadConsti(1, 4),
        Goto(-6),
    ], 5)
    return Executable([main])


def tail_call_program() -> Executable:
    walk = VMFunction("walk", ["list"], [
        GetTag(0, 1), LoadConsti(0, 2), If(1, 2, 1, 2), Ret(0),
        GetField(0, 1, 3), Invoke(0, (3,), 4), Ret(4),
    ], 5)
    return Executable([walk, VMFunction("main", ["list"], [Invoke(0, (0,), 1), Ret(1)], 2)])


def best_of(runs: int, func) -> float:
    """Best thread CPU time of ``runs`` calls (seconds)."""
    best = float("inf")
    for _ in range(runs):
        start = time.thread_time()
        func()
        best = min(best, time.thread_time() - start)
    return best


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    head = kiln.nd.array([0.0])
    cells = ADT(0, [])
    for _ in range(steps):
        cells = ADT(1, [head, cells])

    loop_vm = VirtualMachine(loop_program(), kiln.cpu(0))
    tail_vm = VirtualMachine(tail_call_program(), kiln.cpu(0))
    loop_vm.set_input("main", cells)
    tail_vm.set_input("main", cells)

    def python_walk():
        node = cells
        while node.tag != 0:
            node = node.fields[1]

    rows = [
        ("loop (6 instr/cell)", best_of(3, lambda: loop_vm.invoke_stateful("main")),
         6 * steps + 5),
        ("tail call (5 instr/cell)", best_of(3, lambda: tail_vm.invoke_stateful("main")),
         5 * steps + 6),
        ("python while loop (per cell)", best_of(3, python_walk), steps),
    ]
    print(f"VM dispatch, {steps} list cells")
    for name, seconds, count in rows:
        unit = "cell" if "python" in name else "instruction"
        print(f"  {name:<30} {seconds * 1e9 / count:8.1f} ns per {unit:<12} "
              f"({seconds * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
