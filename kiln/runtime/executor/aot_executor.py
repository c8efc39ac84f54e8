"""``AotModule``: the user-facing wrapper of an AOT executor (TVM's
``tvm.runtime.executor.aot_executor.AotModule``).

Entry point: :class:`AotModule`.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray

__all__ = ["AotModule"]


class AotModule:
    """Wraps the module ``lib["default"](dev)`` returns for an AOT build.

    Example
    -------
    >>> with tvm.transform.PassContext(opt_level=3):                        # doctest: +SKIP
    ...     lib = relay.build(mod, "llvm", executor=Executor("aot"))
    >>> m = tvm.runtime.executor.AotModule(lib["default"](tvm.cpu(0)))      # doctest: +SKIP
    >>> m.set_input("a", a_np); m.run(); out = m.get_output(0).numpy()      # doctest: +SKIP
    """

    def __init__(self, module: Any) -> None:
        if not isinstance(module, AotExecutor):
            raise TVMError(f"AotModule wraps the module lib['default'](dev) of an AOT build, "
                           f"got {type(module).__name__}")
        self.module = module

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Set input ``key`` to ``value``, and every ``name=value`` in ``params``."""
        if key is not None:
            self.module.set_input(key, value)
        for name, val in params.items():
            self.module.set_input(name, val)

    def run(self, **input_dict: Any) -> None:
        """Set ``input_dict`` (if any), then run the model."""
        if input_dict:
            self.set_input(**input_dict)
        self.module.run()

    def get_num_outputs(self) -> int:
        return self.module.get_num_outputs()

    def get_num_inputs(self) -> int:
        return self.module.get_num_inputs()

    def get_input(self, index: int | str, out: NDArray | None = None) -> NDArray:
        return self.module.get_input(index, out)

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        return self.module.get_output(index, out)

    def get_input_index(self, name: str) -> int:
        return self.module.get_input_index(name)

    def get_input_name(self, index: int) -> str:
        return self.module.get_input_name(index)

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the inputs (TVM's return shape)."""
        infos = self.module.input_info
        return ({t.name: t.shape for t in infos}, {t.name: t.dtype for t in infos})
