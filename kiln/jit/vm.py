"""FinalVM: Myia's stack VM for the control flow between linear segments.

State: ``stack`` (values), ``sp``, ``pc`` and a separate return-address stack ``retp``.
Every operand is an offset from ``sp`` (negative: ``-1`` is the top); there is no frame
pointer: the compiler tracks each frame's height and passes it to ``return``/``tailcall``.
A graph with n parameters starts with its frame ``[arg_{n-1}, …, arg_0]`` (arg0 on top).

Instructions (the reference's set; ``pad_stack`` reserves, ``external`` runs a segment):

=============  =========================  ==================================================
opcode         operands                   effect
=============  =========================  ==================================================
push           value                      push a literal (a graph is its code address)
dup            rpos                       push stack[sp + rpos]
external       fn, refs, nout             push fn(*refs) (nout values)
call           jmp                        save pc on retp, jump to stack[sp + jmp]
tailcall       jmp, height, nargs         move the top nargs values over this frame, jump
return         rpos, height               pop the frame, push stack[sp + rpos], pc = retp.pop()
partial        fn, refs                   push Partial(fn, args) (nested partials flatten)
switch         cond, vtrue, vfalse        push vtrue if cond else vfalse
tuple          refs                       push a tuple
tuple_getitem  ref, index                 push stack[sp + ref][index]   (index is a literal)
env_getitem    env, key, default          push env.get(key, default)    (key is a literal)
env_setitem    env, key, value            push a new env with key set   (key is a literal)
pad_stack      size                       make room for size more values
raise          ref                        raise AssertionError(stack[sp + ref])
=============  =========================  ==================================================

Jumping to a :class:`Partial` pushes its bound arguments first-on-top, so they become the
leading parameters (closure conversion put captured values first). Tail calls reuse the
frame: a loop of a million iterations runs in constant stack.

The dispatch loop is one function with the hot state in local variables and the opcodes
tested in order of frequency: about 0.1-0.2 µs per instruction on CPython 3.11.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class Op(IntEnum):
    """FinalVM opcodes (ordered by how often a typical program runs them)."""

    DUP = 0
    EXTERNAL = 1
    PUSH = 2
    TAILCALL = 3
    RETURN = 4
    SWITCH = 5
    PARTIAL = 6
    CALL = 7
    TUPLE = 8
    TUPLE_GETITEM = 9
    PAD_STACK = 10
    ENV_GETITEM = 11
    ENV_SETITEM = 12
    RAISE = 13
    PUSH_GRAPH = 14  # unlinked code only; link turns it into PUSH


class Partial:
    """A closure at runtime: a code address and the values bound to its leading parameters
    (``rargs``: the same values reversed, the order a jump pushes them in)."""

    __slots__ = ("fn", "args", "rargs")

    def __init__(self, fn: int, args: tuple):
        self.fn, self.args, self.rargs = fn, args, args[::-1]

    def __repr__(self) -> str:
        return f"Partial({self.fn}, {self.args!r})"


class FinalVM:
    """Executes linked instructions ``(Op, *operands)``; ``vm(*args)`` runs from pc 0."""

    def __init__(self, code: list[tuple]):
        for instr in code:
            assert len(instr) <= 4, f"FinalVM: instruction {instr} has too many fields"
        self.instrs = list(code)
        # generated Python segments keep their source for listings; the VM calls the function
        # plain ints for opcodes (comparing IntEnum members costs a Python-level call), and
        # one- and two-input externals as their own internal opcodes (no argument list)
        self.code = [_internal(i) for i in code]
        self.stack_size = 0  # the value stack's length after the last run (tests read it)

    def __call__(self, *args: Any) -> Any:
        return self.run(args)

    def run(self, args: tuple) -> Any:  # noqa: C901 (one dispatch loop, by design)
        code = self.code
        stack: list = list(reversed(args)) + [None] * 64
        sp = len(args)
        retp = [-1]
        pc = 0
        DUP, EXTERNAL, PUSH, TAILCALL, RETURN = 0, 1, 2, 3, 4
        SWITCH, PARTIAL, CALL, TUPLE, TUPLE_GETITEM = 5, 6, 7, 8, 9
        PAD_STACK, ENV_GETITEM, ENV_SETITEM, RAISE = 10, 11, 12, 13
        EXTERNAL1, EXTERNAL2 = 20, 21
        while pc >= 0:
            op, a, b, c = code[pc]
            pc += 1
            if op == DUP:
                stack[sp] = stack[sp + a]
                sp += 1
            elif op == EXTERNAL2:
                stack[sp] = a(stack[sp + b], stack[sp + c])
                sp += 1
            elif op == PUSH:
                stack[sp] = a
                sp += 1
            elif op == EXTERNAL1:
                stack[sp] = a(stack[sp + b])
                sp += 1
            elif op == TAILCALL:
                fn = stack[sp + a]
                base = sp - b
                stack[base:base + c] = stack[sp - c:sp]
                sp = base + c
                if fn.__class__ is Partial:
                    n = len(fn.args)
                    stack[sp:sp + n] = fn.rargs
                    sp += n
                    fn = fn.fn
                pc = fn
            elif op == EXTERNAL:
                out = a(*[stack[sp + r] for r in b])
                if c == 1:
                    stack[sp] = out
                    sp += 1
                else:
                    stack[sp:sp + c] = out
                    sp += c
            elif op == RETURN:
                rv = stack[sp + a]
                sp -= b
                stack[sp] = rv
                sp += 1
                pc = retp.pop()
            elif op == PAD_STACK:
                if sp + a + 1 >= len(stack):
                    stack.extend([None] * (a + len(stack)))
            elif op == SWITCH:
                stack[sp] = stack[sp + b] if stack[sp + a] else stack[sp + c]
                sp += 1
            elif op == PARTIAL:
                fn = stack[sp + a]
                vals = tuple([stack[sp + r] for r in b])
                if fn.__class__ is Partial:  # nested partials flatten (Myia asserted)
                    stack[sp] = Partial(fn.fn, fn.args + vals)
                else:
                    stack[sp] = Partial(fn, vals)
                sp += 1
            elif op == CALL:
                retp.append(pc)
                fn = stack[sp + a]
                if fn.__class__ is Partial:
                    n = len(fn.args)
                    stack[sp:sp + n] = fn.rargs
                    sp += n
                    fn = fn.fn
                pc = fn
            elif op == TUPLE:
                stack[sp] = tuple([stack[sp + r] for r in a])
                sp += 1
            elif op == TUPLE_GETITEM:
                stack[sp] = stack[sp + a][b]
                sp += 1
            elif op == ENV_GETITEM:
                stack[sp] = stack[sp + a].get(b, stack[sp + c])
                sp += 1
            elif op == ENV_SETITEM:
                env = dict(stack[sp + a])
                env[b] = stack[sp + c]
                stack[sp] = env
                sp += 1
            elif op == RAISE:
                raise AssertionError(stack[sp + a])
            else:
                raise AssertionError(f"FinalVM: bad instruction {code[pc - 1]}")
        assert sp == 1, f"FinalVM: stack height {sp} at exit"
        self.stack_size = len(stack)
        return stack[0]


EXTERNAL1, EXTERNAL2 = 20, 21


def _internal(instr: tuple) -> tuple:
    op, *rest = tuple(instr) + (None,) * (4 - len(instr))
    if op == Op.EXTERNAL:
        fn, refs, nout = rest
        fn = getattr(fn, "segment_fn", fn)
        if nout == 1 and len(refs) == 1:
            return (EXTERNAL1, fn, refs[0], None)
        if nout == 1 and len(refs) == 2:
            return (EXTERNAL2, fn, refs[0], refs[1])
        return (int(op), fn, refs, nout)
    return (int(op), *rest)


def format_instr(instr: tuple) -> str:
    """One instruction as in the reference's traced listings (``tailcall -1 8 0``)."""
    op, *args = [x for x in instr if x is not None] or [instr[0]]
    name = Op(op).name.lower()
    shown = []
    for a in args:
        if isinstance(a, (list, tuple)) and all(isinstance(x, int) for x in a):
            shown.extend(str(x) for x in a)
        elif callable(a) and not isinstance(a, int):
            shown.append(f"<{type(a).__name__}>" if not hasattr(a, "lines") else repr(a))
        else:
            shown.append(repr(a) if not isinstance(a, int) else str(a))
    return " ".join([name, *shown])


def disassemble(code: list[tuple], mapping: dict | None = None) -> str:
    """The instruction listing, one per line, with graph entry points marked."""
    starts = {v: k for k, v in (mapping or {}).items()}
    lines = []
    for pc, instr in enumerate(code):
        label = f"  # {starts[pc]!r}" if pc in starts else ""
        lines.append(f"{pc:4d} {format_instr(instr)}{label}")
    return "\n".join(lines)
