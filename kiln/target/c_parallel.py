"""Parallel loops of the host C dialect, run on kiln's thread pool (as the LLVM codegen does).

Entry point: :class:`CParallelLaunch`, a mixin of :class:`~kiln.target.codegen_c.CodeGenC`
whose :meth:`~CParallelLaunch.parallel_launch` prints a ``ForKind.PARALLEL`` loop as TVM's
codegen does: the body is outlined into a static ``int32_t <func>_compute_<k>(int task_id,
TVMParallelGroupEnv* penv, void* cdata)`` lambda over a closure struct holding the values it
captures, launched with ``TVMBackendParallelLaunch`` (the runtime's worker pool, sized by
``KILN_NUM_THREADS`` / ``TVM_NUM_THREADS``; the CRT's launch runs the tasks in order). Every
task (the caller included) claims the next contiguous chunk of ``ceil(extent /
(CHUNKS_PER_THREAD * num_task))`` iterations from an atomic counter in the closure until none
is left, so a descheduled thread holds back only its current chunk. A failing call inside the
body records the first message in the closure and stops the other tasks claiming chunks; the
function then sets the message and returns -1.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import c_type
from kiln.tir.stmt_functor import post_order_visit

__all__ = ["CParallelLaunch", "captured_vars", "CHUNKS_PER_THREAD"]

# Chunks per thread of a parallel loop (the C and LLVM codegens). The threads finish at most
# one chunk apart, so the last chunk sets the imbalance: with 4 per thread a ResNet-18 conv's
# chunk was ~300 us and the caller waited ~half of one per launch (jsleeps in
# kiln.runtime.thread_pool.pool_stats); 16 cut that to a few tens of microseconds, while a
# claim (one atomic add) costs well under a microsecond.
CHUNKS_PER_THREAD = 16


def captured_vars(stmt: Any) -> tuple[dict[int, Any], dict[int, str]]:
    """The variables ``stmt`` reads (id -> Var; buffers' data and shape variables included)
    and the element dtype of each buffer data variable among them (id -> dtype)."""
    used: dict[int, Any] = {}
    elements: dict[int, str] = {}

    def add_buffer(buffer: Any) -> None:
        used[id(buffer.data)] = buffer.data
        elements.setdefault(id(buffer.data), str(buffer.dtype))
        for expr in [*buffer.shape, *buffer.strides, buffer.elem_offset]:
            if expr is not None:
                post_order_visit(expr, visit)

    def visit(node: Any) -> None:
        kind = type(node).__name__
        if kind in ("Var", "SizeVar"):
            used[id(node)] = node
        elif kind in ("BufferLoad", "BufferStore"):
            add_buffer(node.buffer)
        elif kind == "Call":
            for arg in node.args:
                if type(arg).__name__ == "Buffer":
                    add_buffer(arg)

    post_order_visit(stmt, visit)
    return used, elements


class CParallelLaunch:
    """Outlines parallel loops into ``TVMBackendParallelLaunch`` lambdas (see the module).

    The printer provides ``_names``, ``_pointer_types``, ``vector_locals``,
    ``vector_type``, ``func_name``, ``_fresh``, ``_line``, ``_lines``, ``_indent``,
    ``_loop_body``, ``_parallel_depth``, ``_region_failure`` and ``restrict``.
    """

    def parallel_launch(self, node: Any, loop_type: str, name: str, begin: str,
                        extent: str) -> None:
        """Print the parallel loop ``node`` (loop variable already bound to ``name``) as a
        lambda launched on the thread pool."""
        captured = self._captures(node)
        self._launch_count = getattr(self, "_launch_count", 0) + 1
        lam = f"{self.func_name}_compute_{self._launch_count}"
        closure_type = f"{lam}_closure"
        fields = [f"  {ctype} {cname};" for cname, ctype, _ in captured]
        fields += [f"  {loop_type} begin;", f"  {loop_type} count;", f"  {loop_type} next;",
                   "  const char* failure;"]
        outer_lines, outer_indent = self._lines, self._indent
        self._lines, self._indent = [], 0
        self._lines.append("typedef struct {\n" + "\n".join(fields) + f"\n}} {closure_type};")
        self._lambda_body(node, loop_type, name, begin, lam, closure_type, captured)
        text = "\n".join(self._lines)
        self._lines, self._indent = outer_lines, outer_indent
        # the lambda goes before the function that launches it (after earlier lambdas)
        slot = getattr(self, "_lambda_slot", (None, 0))
        at = slot[1] if slot[0] is outer_lines else 0
        outer_lines.insert(at, text)
        self._lambda_slot = (outer_lines, at + 1)
        closure = self._fresh("closure")
        values = [cname for cname, _, _ in captured] + [begin, extent, "0", "NULL"]
        self._line("{")
        self._line(f"  {closure_type} {closure} = {{{', '.join(values)}}};")
        self._line(f"  if (TVMBackendParallelLaunch({lam}, &{closure}, 0) != 0) return -1;")
        self._line(f"  if ({closure}.failure != NULL) {{ TVMAPISetLastError({closure}.failure); "
                   "return -1; }")
        self._line("}")

    def _lambda_body(self, node: Any, loop_type: str, name: str, begin: str, lam: str,
                     closure_type: str, captured: list[tuple[str, str, bool]]) -> None:
        task_id, penv, cdata, closure = (self._fresh(hint) for hint in
                                         ("task_id", "penv", "cdata", "closure"))
        chunk, start, stop, count = (self._fresh(f"{name}_{part}")
                                     for part in ("chunk", "start", "stop", "count"))
        label = self._fresh(f"{name}_done")
        self._line(f"static int32_t {lam}(int {task_id}, TVMParallelGroupEnv* {penv}, "
                   f"void* {cdata}) {{")
        self._indent = 1
        self._line(f"{closure_type}* {closure} = ({closure_type}*){cdata};")
        self._line(f"(void){task_id};")
        for cname, ctype, restrict in captured:
            qualifier = f" {self.restrict}" if restrict else ""
            self._line(f"{ctype}{qualifier} {cname} = {closure}->{cname};")
        self._line(f"const {loop_type} {count} = {closure}->count;")
        parts = f"{CHUNKS_PER_THREAD} * {penv}->num_task"
        self._line(f"{loop_type} {chunk} = ({count} + {parts} - 1) / ({parts});")
        self._line(f"if ({chunk} < 1) {chunk} = 1;")
        self._line("for (;;) {")
        self._indent += 1
        self._line(f"const {loop_type} {start} = "
                   f"__atomic_fetch_add(&{closure}->next, {chunk}, __ATOMIC_RELAXED);")
        self._line(f"if ({start} >= {count} || "
                   f"__atomic_load_n(&{closure}->failure, __ATOMIC_RELAXED) != NULL) break;")
        self._line(f"const {loop_type} {stop} = "
                   f"{count} - {start} < {chunk} ? {count} : {start} + {chunk};")
        offset = "" if begin == "0" else f"{closure}->begin + "
        self._line(f"for ({loop_type} {name} = {offset}{start}; {name} < {offset}{stop}; "
                   f"++{name}) {{")
        self._parallel_depth += 1
        self._region_failure = (f"{closure}->failure", label)
        self._loop_body(node)
        self._region_failure = None
        self._parallel_depth -= 1
        self._line("}")
        self._indent -= 1
        self._line("}")
        self._line(f"{label}:;")
        self._line("return 0;")
        self._indent = 0
        self._line("}")

    def _captures(self, node: Any) -> list[tuple[str, str, bool]]:
        """(C name, C type, restrict) of every variable defined outside ``node`` that its body
        reads: buffer pointers (restrict: kernel buffers never alias), stack arrays of
        vectors (as pointers to their vectors), scalars."""
        used, elements = captured_vars(node.body)
        captured = []
        for key, cname in self._names.items():
            if key not in used or used[key] is node.loop_var:
                continue
            var = used[key]
            if key in self.vector_locals:
                lanes = self.vector_locals[key]
                element = DataType(elements[key]).element_of
                captured.append((cname, f"{self.vector_type(element.with_lanes(lanes))}*",
                                 True))
            elif key in self._pointer_types:
                captured.append((cname, self._pointer_types[key], key in elements))
            else:
                t = DataType(var.dtype)
                ctype = "void*" if t.is_handle else (
                    self.vector_type(t) if t.lanes > 1 else c_type(t))
                captured.append((cname, ctype, False))
        return captured
