"""What Relay supplies to the IR core: the hooks of :mod:`kiln.ir.hooks`, registered on import.

Entry point: :func:`register_ir_hooks` (called by ``kiln/relay/__init__.py``).

Each hook imports its implementation on first call, so ``import kiln.relay`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.hooks import register_hook

__all__ = ["register_ir_hooks"]


def make_call(op: Any, args: Any) -> Any:
    """``op(*args)`` as a Relay call node (a called GlobalVar or Constructor)."""
    from kiln.relay.expr import Call

    return Call(op, list(args))


def function_from_expr(expr: Any) -> Any:
    """A Relay function of ``expr``'s free variables, returning ``expr``."""
    from kiln.relay.analysis import free_vars
    from kiln.relay.expr import Function

    return Function(free_vars(expr), expr)


def import_std(mod: Any, file_to_import: str) -> None:
    """Add the definitions of a Relay standard library file (``prelude.rly``) to ``mod``."""
    from kiln.relay import prelude

    prelude.import_into(mod, file_to_import)


def astext(node: Any, show_meta_data: bool = True) -> str:
    """``node`` in the Relay text format."""
    from kiln.relay import printer

    return printer.astext(node, show_meta_data)


def pass_by_name(name: str) -> Any:
    """A new instance of the Relay pass named ``name``, or None when there is none."""
    from kiln.relay import transform

    factory = getattr(transform, name, None)
    return factory() if factory is not None else None


def load_op_library() -> None:
    """Import the Relay operator library, which registers every operator."""
    import kiln.relay.op  # noqa: F401 (registers on import)


def register_ir_hooks() -> None:
    """Install Relay's implementations of the IR core's hooks."""
    for name, value in (("make_call", make_call), ("function_from_expr", function_from_expr),
                        ("import_std", import_std), ("astext", astext),
                        ("pass_by_name", pass_by_name), ("load_op_library", load_op_library)):
        register_hook(name, value)
