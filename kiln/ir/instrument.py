"""TVM's ``tvm.ir.instrument`` (also ``tvm.instrument``): hooks run around every pass.

Instruments are honoured by ``PassContext(instruments=[...])``; the base class, the decorator and
the timing instrument live with the pass manager in :mod:`kiln.ir.transform`. This module adds
TVM's decorator spelling ``pass_instrument()`` and the printing instruments.

Entry points: :class:`PassInstrument`, :func:`pass_instrument`, :class:`PassTimingInstrument`,
:class:`PassPrintingInstrument`, :class:`PrintAfterAll`, :class:`PrintBeforeAll`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kiln.ir import transform
from kiln.ir.transform import PassInstrument, PassTimingInstrument

__all__ = ["PassInstrument", "pass_instrument", "PassTimingInstrument",
           "PassPrintingInstrument", "PrintAfterAll", "PrintBeforeAll"]


def pass_instrument(pi_cls: type | None = None) -> type | Callable[[type], type]:
    """Make a plain class with some of PassInstrument's five methods an instrument; usable as
    ``@pass_instrument`` or ``@pass_instrument()``."""
    return transform.pass_instrument if pi_cls is None else transform.pass_instrument(pi_cls)


@pass_instrument
class PassPrintingInstrument:
    """Print the IR before the passes named in ``print_before_pass_names`` and after those in
    ``print_after_pass_names``."""

    def __init__(self, print_before_pass_names: Iterable[str],
                 print_after_pass_names: Iterable[str]):
        self.print_before_pass_names = list(print_before_pass_names)
        self.print_after_pass_names = list(print_after_pass_names)

    def run_before_pass(self, mod, pass_info) -> None:
        if pass_info.name in self.print_before_pass_names:
            print(f"Print IR before: {pass_info.name}\n{mod}\n\n")

    def run_after_pass(self, mod, pass_info) -> None:
        if pass_info.name in self.print_after_pass_names:
            print(f"Print IR after: {pass_info.name}\n{mod}\n\n")


@pass_instrument
class PrintAfterAll:
    """Print each pass's name and the IR it produced."""

    def run_after_pass(self, mod, info) -> None:
        print(f"After Running Pass: {info}")
        print(mod)


@pass_instrument
class PrintBeforeAll:
    """Print each pass's name and the IR it receives."""

    def run_before_pass(self, mod, info) -> None:
        print(f"Before Running Pass: {info}")
        print(mod)
