"""Pass infrastructure (``kiln.transform``, TVM's ``tvm.transform``).

Entry points: :class:`PassContext` (the ``with`` block holding opt_level, required/disabled
passes, instruments and config), :class:`PassInfo`, :class:`Pass`, :class:`ModulePass`,
:class:`Sequential`, :func:`module_pass`, :class:`PassInstrument`, :func:`pass_instrument`,
:class:`PassTimingInstrument`, :func:`PrintIR`, :func:`register_pass_config`.

A pass is an object called on an IRModule that returns a new IRModule. Calling a pass runs it
unconditionally (after asking the instruments' ``should_run``); :class:`Sequential` runs only the
passes the current PassContext enables: a pass named in ``disabled_pass`` never runs, one named
in ``required_pass`` always runs, and otherwise a pass runs when its opt_level is at most the
context's. ``KILN_DEBUG=1`` prints each pass's name and time to stderr, ``KILN_DEBUG=2`` also
prints the module after each pass.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from kiln.ir.hooks import get_hook
from kiln.runtime.config import debug_level
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = [
    "PassContext", "PassInfo", "Pass", "ModulePass", "Sequential", "module_pass",
    "PassInstrument", "pass_instrument", "PassTimingInstrument", "PrintIR",
    "register_pass_config", "resolve_pass",
]

# name -> expected Python type of the value; other layers register their keys at import.
_PASS_CONFIG_TYPES: dict[str, type] = {
    "relay.FuseOps.max_depth": int,
    "relay.FuseOps.link_params": bool,
    "relay.backend.use_auto_scheduler": bool,
    "relay.backend.use_meta_schedule": bool,
    "relay.backend.disable_compile_engine_cache": bool,
    "relay.ToMixedPrecision.keep_orig_output_dtype": bool,
    "relay.fallback_device_type": int,
    "tir.disable_vectorize": bool,
    "tir.parallel_min_work": int,
    "tir.disable_assert": bool,
    "tir.noalias": bool,
    "tir.instrument_bound_checkers": bool,
    "tir.disable_storage_rewrite": bool,
    "tir.UnrollLoop": dict,
    "tir.usmp.enable": bool,
    "tir.usmp.algorithm": str,
    "tir.usmp.use_workspace_io": bool,
    "tir.link_params": bool,
}


def register_pass_config(name: str, value_type: type) -> None:
    """Declare a PassContext config key and the type of its value.

    Example
    -------
    >>> register_pass_config("kiln.example.unroll", int)
    >>> PassContext(config={"kiln.example.unroll": 4}).config["kiln.example.unroll"]
    4
    """
    _PASS_CONFIG_TYPES[name] = value_type


def _check_config(config: dict[str, Any]) -> dict[str, Any]:
    checked = {}
    for key, value in config.items():
        expected = _PASS_CONFIG_TYPES.get(key)
        if expected is None:
            known = ", ".join(sorted(_PASS_CONFIG_TYPES))
            raise TVMError(f"Invalid config option {key!r}; candidates are: {known}")
        if expected is bool and isinstance(value, int):
            value = bool(value)
        elif expected is int and isinstance(value, bool):
            value = int(value)
        elif expected is dict and isinstance(value, Object) and hasattr(value, "items"):
            value = dict(value.items())
        if not isinstance(value, expected):
            raise TVMError(
                f"config option {key!r} expects a {expected.__name__}, got {value!r}")
        checked[key] = value
    return checked


@register_object("transform.PassInfo")
class PassInfo(Object):
    """A pass's name, the opt_level it needs, and the passes it requires to run first."""

    _fields = {"opt_level": int, "name": str, "required": str}

    def __init__(self, opt_level: int, name: str, required: Sequence[str] | None = None) -> None:
        if isinstance(required, str):
            required = [required]
        super().__init__(int(opt_level), name, tuple(required or ()))

    def __repr__(self) -> str:
        return f"PassInfo(name={self.name!r}, opt_level={self.opt_level})"


@register_object("instrument.PassInstrument")
class PassInstrument(Object):
    """Hooks called around passes; override any of the five methods.

    Example
    -------
    >>> class CountPasses(PassInstrument):
    ...     count = 0
    ...     def run_after_pass(self, mod, info):
    ...         type(self).count += 1
    """

    # Instruments are plain stateful Python objects (timers, counters), not immutable IR.
    _extra_slots = ("__dict__",)
    __setattr__ = object.__setattr__

    def enter_pass_ctx(self) -> None:
        """Called when a PassContext holding this instrument is entered."""

    def exit_pass_ctx(self) -> None:
        """Called when that PassContext is exited."""

    def should_run(self, mod, info: PassInfo) -> bool:
        """Return False to skip the pass."""
        return True

    def run_before_pass(self, mod, info: PassInfo) -> None:
        """Called before a pass runs."""

    def run_after_pass(self, mod, info: PassInfo) -> None:
        """Called after a pass ran, with the pass's result."""


def pass_instrument(pi_cls: type) -> type:
    """Class decorator: turn a plain class with some PassInstrument methods into an instrument.

    Example
    -------
    >>> @pass_instrument
    ... class Skip:
    ...     def should_run(self, mod, info):
    ...         return info.name != "FoldConstant"
    >>> isinstance(Skip(), PassInstrument)
    True
    """
    if not inspect.isclass(pi_cls):
        raise TypeError("pass_instrument decorates a class")
    if issubclass(pi_cls, PassInstrument):
        return pi_cls
    return type(pi_cls.__name__, (pi_cls, PassInstrument),
                {"__doc__": pi_cls.__doc__, "__module__": pi_cls.__module__,
                 "__qualname__": pi_cls.__qualname__})


@register_object("transform.PassContext")
class PassContext(Object):
    """The settings passes run under, used as a ``with`` block.

    Example
    -------
    >>> with PassContext(opt_level=3, disabled_pass=["FoldConstant"]) as ctx:
    ...     PassContext.current().opt_level
    3
    """

    _fields = {"opt_level": int, "required_pass": str, "disabled_pass": str,
               "instruments": PassInstrument, "config": "any"}
    _stack: list[PassContext] = []

    def __init__(self, opt_level: int = 2, required_pass: Sequence[str] | None = None,
                 disabled_pass: Sequence[str] | None = None,
                 instruments: Sequence[PassInstrument] | None = None,
                 config: dict[str, Any] | None = None) -> None:
        for inst in instruments or ():
            if not isinstance(inst, PassInstrument):
                raise TypeError(
                    f"instruments must be PassInstrument objects, got {type(inst).__name__}")
        super().__init__(int(opt_level), tuple(required_pass or ()),
                         tuple(disabled_pass or ()), tuple(instruments or ()),
                         _check_config(dict(config or {})))

    @staticmethod
    def current() -> PassContext:
        """The innermost active PassContext (a default one, opt_level 2, outside any)."""
        return PassContext._stack[-1] if PassContext._stack else _DEFAULT_CONTEXT

    def __enter__(self) -> PassContext:
        entered = []
        try:
            for inst in self.instruments:
                inst.enter_pass_ctx()
                entered.append(inst)
        except Exception:
            for inst in reversed(entered):
                inst.exit_pass_ctx()
            raise
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc_info) -> None:
        popped = PassContext._stack.pop()
        assert popped is self, "PassContext exited out of order"
        for inst in self.instruments:
            inst.exit_pass_ctx()

    def override_instruments(self, instruments: Sequence[PassInstrument]) -> None:
        """Replace the instruments (exiting the old ones and entering the new, if active)."""
        active = self in PassContext._stack
        if active:
            for inst in self.instruments:
                inst.exit_pass_ctx()
        self._set("instruments", tuple(instruments))
        if active:
            for inst in self.instruments:
                inst.enter_pass_ctx()

    def pass_enabled(self, info: PassInfo) -> bool:
        """Whether :class:`Sequential` runs a pass with ``info`` in this context."""
        if info.name in self.disabled_pass:
            return False
        if info.name in self.required_pass:
            return True
        return info.opt_level <= self.opt_level

    @staticmethod
    def list_configs() -> dict[str, str]:
        """Every registered config key and the name of its value type."""
        return {key: t.__name__ for key, t in sorted(_PASS_CONFIG_TYPES.items())}

    def __repr__(self) -> str:
        return (f"PassContext(opt_level={self.opt_level}, required_pass={self.required_pass}, "
                f"disabled_pass={self.disabled_pass}, config={self.config})")


_DEFAULT_CONTEXT = PassContext()


@register_object("transform.Pass")
class Pass(Object):
    """Base of passes: call one on an IRModule to get the transformed module."""

    _fields = {"pass_info": PassInfo}

    @property
    def info(self) -> PassInfo:
        return self.pass_info

    def __call__(self, mod) -> Any:
        from kiln.ir.module import IRModule

        if not isinstance(mod, IRModule):
            raise TypeError(
                f"pass {self.pass_info.name!r} runs on an IRModule, got {type(mod).__name__}")
        ctx = PassContext.current()
        info = self.pass_info
        if not all(inst.should_run(mod, info) for inst in ctx.instruments):
            return mod
        for inst in ctx.instruments:
            inst.run_before_pass(mod, info)
        level = debug_level()
        start = time.perf_counter()
        result = self._transform(mod, ctx)
        if level >= 1 and not isinstance(self, Sequential):
            elapsed = (time.perf_counter() - start) * 1e3
            print(f"[kiln] pass {info.name}: {elapsed:.3f} ms", file=sys.stderr)
            if level >= 2:
                print(result.astext(), file=sys.stderr)
        for inst in ctx.instruments:
            inst.run_after_pass(result, info)
        return result

    def _transform(self, mod, ctx: PassContext):
        raise NotImplementedError(f"{type(self).__name__} must implement _transform")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pass_info.name!r})"


@register_object("transform.ModulePass")
class ModulePass(Pass):
    """A pass made of a function ``pass_func(mod, ctx) -> mod``."""

    _fields = {"pass_func": "any"}

    def __init__(self, pass_func: Callable, pass_info: PassInfo) -> None:
        super().__init__(pass_info, pass_func)

    def _transform(self, mod, ctx: PassContext):
        result = self.pass_func(mod, ctx)
        from kiln.ir.module import IRModule

        if not isinstance(result, IRModule):
            raise TVMError(
                f"module pass {self.pass_info.name!r} returned {type(result).__name__}, "
                "expected an IRModule")
        return result


def resolve_pass(name: str) -> Pass:
    """The pass a ``required`` name refers to (Relay's passes, through its hook)."""
    required = get_hook("pass_by_name")(name)
    if required is None:
        raise TVMError(f"required pass {name!r} is not a known pass")
    return required


@register_object("transform.Sequential")
class Sequential(Pass):
    """Run passes in order, each only if the current PassContext enables it.

    Example
    -------
    >>> from kiln import relay
    >>> seq = Sequential([relay.transform.InferType()])
    >>> x = relay.var("x", shape=(2,))
    >>> from kiln.ir.module import IRModule
    >>> seq(IRModule.from_expr(x))["main"].checked_type
    fn (Tensor[(2,), float32]) -> Tensor[(2,), float32]
    """

    _fields = {"passes": Pass}

    def __init__(self, passes: Sequence[Pass] | None = None, opt_level: int = 0,
                 name: str = "sequential", required: Sequence[str] | None = None) -> None:
        passes = list(passes or ())
        for item in passes:
            if not isinstance(item, Pass):
                raise TypeError(f"Sequential holds passes, got {type(item).__name__}")
        super().__init__(PassInfo(opt_level, name, required), tuple(passes))

    def _transform(self, mod, ctx: PassContext):
        for item in self.passes:
            info = item.pass_info
            if not ctx.pass_enabled(info):
                continue
            for required in info.required:
                mod = resolve_pass(required)(mod)
            mod = item(mod)
        return mod


def _wrap_class_module_pass(pass_cls: type, info: PassInfo) -> type:
    """A ModulePass subclass whose instances build ``pass_cls(*args)`` and call its
    ``transform_module(mod, ctx)``."""

    class PyModulePass(ModulePass):
        _extra_slots = ("_inst",)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inst = pass_cls(*args, **kwargs)
            super().__init__(inst.transform_module, info)
            self._set("_inst", inst)

        def __getattr__(self, name: str) -> Any:
            if name == "_inst":
                raise AttributeError(name)
            return getattr(self._inst, name)

    functools.update_wrapper(PyModulePass.__init__, pass_cls.__init__)
    PyModulePass.__name__ = pass_cls.__name__
    PyModulePass.__qualname__ = pass_cls.__qualname__
    PyModulePass.__doc__ = pass_cls.__doc__
    return PyModulePass


def make_pass_decorator(kind: str, wrap_class: Callable, make_pass: Callable,
                        pass_func, opt_level, name, required):
    """Shared body of ``module_pass`` and ``relay.transform.function_pass``."""
    if opt_level is None:
        raise ValueError(f"Please provide opt_level for the {kind} pass.")
    if required is not None and not isinstance(required, list | tuple):
        raise TypeError("required must be a list or tuple of pass names")

    def create(pass_arg):
        info = PassInfo(opt_level, name or pass_arg.__name__, required)
        if inspect.isclass(pass_arg):
            return wrap_class(pass_arg, info)
        if not callable(pass_arg):
            raise TypeError(f"pass_func must be a callable for a {kind} pass")
        return make_pass(pass_arg, info)

    return create(pass_func) if pass_func else create


def module_pass(pass_func: Callable | type | None = None, opt_level: int | None = None,
                name: str | None = None, required: Sequence[str] | None = None):
    """Decorate ``f(mod, ctx) -> mod`` (or a class with ``transform_module``) as a ModulePass.

    Example
    -------
    >>> @module_pass(opt_level=1)
    ... def identity(mod, ctx):
    ...     return mod
    >>> identity.info.name
    'identity'
    """
    return make_pass_decorator("module", _wrap_class_module_pass, ModulePass,
                               pass_func, opt_level, name, required)


def PrintIR(header: str = "", show_meta_data: bool = False) -> ModulePass:  # noqa: N802
    """A pass that prints the module (to stdout) and returns it unchanged."""

    def print_ir(mod, ctx):
        print(f"PrintIR({header}):\n{mod.astext()}")
        return mod

    return ModulePass(print_ir, PassInfo(0, "PrintIR"))


@pass_instrument
class PassTimingInstrument:
    """Record how long each pass takes (nested passes included); :meth:`render` the report.

    Example
    -------
    >>> timing = PassTimingInstrument()
    >>> with PassContext(instruments=[timing]):
    ...     report = timing.render()
    """

    def __init__(self) -> None:
        self._open: list[list] = []
        self._roots: list[list] = []

    def enter_pass_ctx(self) -> None:
        self._open, self._roots = [], []

    def exit_pass_ctx(self) -> None:
        self._open, self._roots = [], []

    def run_before_pass(self, mod, info: PassInfo) -> None:
        # A record is [name, start, duration, children].
        record = [info.name, time.perf_counter(), 0.0, []]
        (self._open[-1][3] if self._open else self._roots).append(record)
        self._open.append(record)

    def run_after_pass(self, mod, info: PassInfo) -> None:
        record = self._open.pop()
        record[2] = time.perf_counter() - record[1]

    def render(self) -> str:
        """One line per pass: ``name: total_us [self_us] (% of all; % of parent)``."""
        total = sum(r[2] for r in self._roots) or 1e-12
        lines: list[str] = []

        def emit(record, depth, parent_time):
            name, _, duration, children = record
            own = duration - sum(c[2] for c in children)
            lines.append(
                f"{'  ' * depth}{name}: {duration * 1e6:.0f}us [{own * 1e6:.0f}us] "
                f"({100 * duration / total:.2f}%; {100 * duration / (parent_time or 1e-12):.2f}%)")
            for child in children:
                emit(child, depth + 1, duration)

        for root in self._roots:
            emit(root, 0, total)
        return "\n".join(lines)
