"""TVM's ``tvm.contrib.graph_executor``: the user-facing wrapper of a graph executor.

Entry points: :func:`create`, :class:`GraphModule`.

``GraphModule(lib["default"](dev))`` wraps the executor module a built model returns;
``create(graph_json, lib, dev)`` builds one from a graph JSON string and a kernel module.
Methods keep TVM's names and call the executor's real methods (no string lookups).

Example
-------
>>> import kiln as tvm                                   # doctest: +SKIP
>>> m = GraphModule(lib["default"](tvm.cpu(0)))          # doctest: +SKIP
>>> m.set_input("x", x); m.run(); y = m.get_output(0).numpy()   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime.device import Device
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import GraphExecutor
from kiln.runtime.graph_executor import create as create_executor
from kiln.runtime.module import Module
from kiln.runtime.ndarray import NDArray
from kiln.runtime.profiling import BenchmarkResult, time_repeats

__all__ = ["create", "GraphModule"]


def create(
    graph_json_str: str, libmod: Module, device: Device | Sequence[Device]
) -> GraphModule:
    """Create a :class:`GraphModule` running ``graph_json_str`` with kernels from ``libmod``.

    Parameters
    ----------
    graph_json_str : str
        The graph executor JSON (``lib.get_graph_json()`` of a built model).
    libmod : Module
        The module holding the graph's kernels.
    device : Device or list of Device
        Where to run. A heterogeneous graph (built from ``on_device`` annotations) takes one
        device per planned device, e.g. ``[kiln.cpu(0), kiln.opencl(0)]``: each entry goes
        to the device equal to its ``(device_index, device_id)``, else to the first given
        device of its type, else to the first device.

    Example
    -------
    >>> m = create(graph_json, lib, kiln.cpu(0))      # doctest: +SKIP
    """
    if not isinstance(graph_json_str, str):
        getter = getattr(graph_json_str, "get_graph_json", None)
        if getter is None:
            raise TVMError(
                f"graph_json_str must be a str, got {type(graph_json_str).__name__}"
            )
        graph_json_str = getter()
    return GraphModule(create_executor(graph_json_str, libmod, device))


class GraphModule:
    """Wrapper of a graph executor module with TVM's ``GraphModule`` methods.

    Parameters
    ----------
    module : GraphExecutor
        The executor module, e.g. ``lib["default"](dev)``.

    Attributes
    ----------
    module : GraphExecutor
        The wrapped executor.
    """

    def __init__(self, module: GraphExecutor) -> None:
        if not isinstance(module, GraphExecutor):
            raise TVMError(
                f"GraphModule wraps a GraphExecutor module, got {type(module).__name__}"
            )
        self.module = module

    # -- inputs -------------------------------------------------------------------------------

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Set input ``key`` (name or index) to ``value``, and/or inputs by keyword.

        Keyword names that are not inputs of the graph are skipped, as in TVM (a params dict
        may hold constants the build folded away); an explicit ``key`` must exist.
        """
        if key is not None:
            self.module.set_input(key, value)
        # Largest first, as TVM does, so big params are copied while memory is fresh.
        for name in sorted(params, key=lambda k: -_size(params[k])):
            if self.module.get_input_index(name) >= 0:
                self.module.set_input(name, params[name])

    def set_input_zero_copy(
        self, key: int | str | None = None, value: NDArray | None = None, **params: NDArray
    ) -> None:
        """Bind inputs to the given NDArrays without copying (64-byte aligned, same shape)."""
        if key is not None:
            self.module.set_input_zero_copy(key, value)
        for name, array in params.items():
            if self.module.get_input_index(name) >= 0:
                self.module.set_input_zero_copy(name, array)

    def set_output_zero_copy(self, index: int, value: NDArray) -> None:
        """Make output ``index`` be written straight into ``value``."""
        self.module.set_output_zero_copy(index, value)

    def get_input(self, index: int | str, out: NDArray | None = None) -> NDArray:
        return self.module.get_input(index, out)

    def get_input_index(self, name: str) -> int:
        """Index of input ``name``, or -1 if the graph has no such input."""
        return self.module.get_input_index(name)

    def get_num_inputs(self) -> int:
        return self.module.get_num_inputs()

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the graph's data inputs (loaded params excluded)."""
        info = self.module.get_input_info()
        return info["shape"], info["dtype"]

    # -- outputs ------------------------------------------------------------------------------

    def get_num_outputs(self) -> int:
        return self.module.get_num_outputs()

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        """Output ``index``: the executor's array (overwritten by the next run) or ``out``."""
        return self.module.get_output(index, out)

    def get_output_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the outputs, keyed by output node name."""
        info = self.module.get_output_info()
        return info["shape"], info["dtype"]

    # -- running ------------------------------------------------------------------------------

    def run(self, **input_dict: Any) -> None:
        """Run the graph once, after setting ``input_dict`` inputs (if any)."""
        if input_dict:
            self.set_input(**input_dict)
        self.module.run()

    def load_params(self, params_bytes: bytes) -> None:
        """Load params from a params blob (``save_param_dict`` bytes)."""
        self.module.load_params(params_bytes)

    def share_params(self, other: GraphModule, params_bytes: bytes) -> None:
        """Use ``other``'s copies of the params named in ``params_bytes`` (no extra memory)."""
        if not isinstance(other, GraphModule):
            raise TVMError(f"share_params needs a GraphModule, got {type(other).__name__}")
        self.module.share_params(other.module, params_bytes)

    def __getitem__(self, key: str) -> Any:
        """A function of the underlying module by TVM name (``m["run"]``)."""
        return self.module[key]

    def benchmark(
        self,
        device: Device,
        func_name: str = "run",
        repeat: int = 5,
        number: int = 5,
        min_repeat_ms: float | None = None,
        limit_zero_time_iterations: int = 100,
        end_to_end: bool = False,
        cooldown_interval_ms: float = 0,
        repeats_to_cooldown: int = 1,
        **kwargs: Any,
    ) -> BenchmarkResult:
        """Time the model: ``repeat`` measurements, each the mean of ``number`` runs.

        Parameters
        ----------
        device : Device
            The device the model runs on (synchronised after each measurement).
        func_name : str
            The module function to time; ``"run"`` runs the graph in one C loop.
        repeat, number : int
            Measurements, and back-to-back calls per measurement.
        min_repeat_ms : float, optional
            Grow ``number`` until one measurement takes at least this long.
        limit_zero_time_iterations : int
            Retries of a measurement that came out as zero seconds.
        end_to_end : bool
            Also time copying the inputs in (from ``kwargs``, else the current inputs) and
            the outputs back to NumPy.
        cooldown_interval_ms, repeats_to_cooldown
            Sleep ``cooldown_interval_ms`` after every ``repeats_to_cooldown`` measurements.
        **kwargs
            Inputs to set before timing.

        Returns
        -------
        BenchmarkResult
            ``.mean``, ``.median``, ``.min``, ``.max``, ``.std`` in seconds, ``.results``.

        Example
        -------
        >>> print(m.benchmark(kiln.cpu(0), repeat=3, number=10))   # doctest: +SKIP
        """
        if end_to_end:
            inputs = {k: np.asarray(v.numpy() if isinstance(v, NDArray) else v)
                      for k, v in kwargs.items()}
            if not inputs:
                inputs = {name: self.module.get_input(name).numpy()
                          for name in self.get_input_info()[0]}
            outputs = range(self.get_num_outputs())

            def run(n: int) -> None:
                for _ in range(n):
                    self.set_input(**inputs)
                    self.module.run()
                    for i in outputs:
                        self.module.get_output(i).numpy()
                device.sync()
        else:
            if kwargs:
                self.set_input(**kwargs)
            if func_name == "run":
                def run(n: int) -> None:
                    self.module.run_repeated(n)
                    device.sync()
            else:
                func = self.module.get_function(func_name)
                if func is None:
                    raise TVMError(f"benchmark: the module has no function {func_name!r}")

                def run(n: int) -> None:
                    for _ in range(n):
                        func()
                    device.sync()
        return time_repeats(
            run, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms,
            limit_zero_time_iterations=limit_zero_time_iterations,
            cooldown_interval_ms=cooldown_interval_ms, repeats_to_cooldown=repeats_to_cooldown,
        )


def _size(value: Any) -> int:
    shape = value.shape if isinstance(value, NDArray) else np.shape(value)
    return int(np.prod(shape))
