"""The ``GraphExecutorFactory`` module: a built model (graph JSON + params + kernel library).

Entry points: :class:`GraphExecutorFactory`, :func:`save_factory`, :func:`load_factory`
(registered as ``runtime.module.loadbinary_GraphExecutorFactory``), and the global
``tvm.graph_executor_factory.create``.

The factory imports the kernel library and offers TVM's functions: ``<module_name>(dev...)``
creates a :class:`~kiln.runtime.graph_executor.GraphExecutor` with the params already set,
``get_graph_json``, ``get_graph_params``, ``debug_create(module_name, dev...)`` and
``remove_params``. Its binary form is TVM's ``GraphExecutorFactory::SaveToBinary``::

    string graph_json | u64 n | vector<string> names (u64 count + strings)
    | n x NDArray blob | string module_name

(the count is written twice: once on its own, once as the vector's length).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import GraphExecutor
from kiln.runtime.graph_executor import create as create_executor
from kiln.runtime.module import Module, ModuleProperty
from kiln.runtime.ndarray import NDArray, array
from kiln.runtime.params import load_ndarray, write_ndarray
from kiln.runtime.registry import register_func

__all__ = ["GraphExecutorFactory", "save_factory", "load_factory"]


class GraphExecutorFactory(Module):
    """A built graph model as a Module (TVM's ``GraphExecutorFactory``).

    Parameters
    ----------
    graph_json : str
        The graph executor JSON.
    lib : Module or None
        The kernel library; imported by the factory (None while loading from bytes, when the
        import tree supplies it).
    module_name : str
        Name of the function that creates an executor (``"default"``).
    params : dict of str to NDArray
        Params set into every executor the factory creates.

    Example
    -------
    >>> factory = GraphExecutorFactory(graph_json, lib, "default", params)  # doctest: +SKIP
    >>> executor = factory["default"](kiln.cpu(0))                          # doctest: +SKIP
    """

    type_key = "GraphExecutorFactory"
    _property_mask = ModuleProperty.BINARY_SERIALIZABLE | ModuleProperty.RUNNABLE

    def __init__(
        self,
        graph_json: str,
        lib: Module | None,
        module_name: str = "default",
        params: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(graph_json, str):
            raise TVMError(f"graph_json must be a str, got {type(graph_json).__name__}")
        if not isinstance(module_name, str) or not module_name:
            raise TVMError(f"module_name must be a non-empty str, got {module_name!r}")
        self.graph_json = graph_json
        self.module_name = module_name
        self.params = {
            str(name): value if isinstance(value, NDArray) else array(value)
            for name, value in (params or {}).items()
        }
        if lib is not None:
            self.import_module(lib)

    @property
    def lib(self) -> Module:
        """The kernel library (the factory's first import)."""
        if not self.imports:
            raise TVMError("GraphExecutorFactory has no kernel library imported")
        return self.imports[0]

    def create(self, *devices: Any) -> GraphExecutor:
        """A new executor on ``devices`` with the factory's params set."""
        executor = create_executor(self.graph_json, self.lib, *devices)
        for name, value in self.params.items():
            if executor.get_input_index(name) >= 0:
                executor.set_input(name, value)
        return executor

    def get_graph_json(self) -> str:
        return self.graph_json

    def get_graph_params(self) -> dict[str, NDArray]:
        return dict(self.params)

    def debug_create(self, module_name: str, *devices: Any) -> GraphExecutor:
        """An executor for the debugger (``GraphModuleDebug`` wraps it), params set."""
        self._check_module_name(module_name)
        return self.create(*devices)

    def remove_params(self) -> GraphExecutorFactory:
        """The same factory without params (for shipping weights separately)."""
        return GraphExecutorFactory(self.graph_json, self.lib, self.module_name, {})

    def _check_module_name(self, module_name: str) -> None:
        if module_name != self.module_name:
            raise TVMError(
                f"this factory builds module {self.module_name!r}, not {module_name!r}"
            )

    def _get_function(self, name: str) -> Any:
        """TVM's functions by name; ``<module_name>`` creates an executor."""
        if name == self.module_name:
            return self.create
        if name in ("get_graph_json", "get_graph_params", "debug_create", "remove_params"):
            return getattr(self, name)
        return None

    def save_to_binary(self) -> bytes:
        return save_factory(self)


def save_factory(factory: GraphExecutorFactory) -> bytes:
    """TVM's ``GraphExecutorFactory::SaveToBinary`` bytes of ``factory``."""
    writer = BinaryWriter()
    writer.string(factory.graph_json)
    names = list(factory.params)
    writer.u64(len(names))
    writer.string_vector(names)
    for name in names:
        write_ndarray(writer, factory.params[name])
    writer.string(factory.module_name)
    return writer.getvalue()


def load_factory(data: bytes | bytearray | memoryview) -> GraphExecutorFactory:
    """Rebuild a factory from :func:`save_factory` bytes (its library comes from imports).

    Example
    -------
    >>> f = GraphExecutorFactory('{"nodes": []}', None, "default", {})
    >>> load_factory(save_factory(f)).module_name
    'default'
    """
    reader = BinaryReader(data, what="GraphExecutorFactory blob")
    graph_json = reader.string("graph_json")
    count = reader.u64("param count")
    names = reader.string_vector("param names")
    if len(names) != count:
        raise TVMError(
            f"GraphExecutorFactory blob is corrupt: {count} params but {len(names)} names"
        )
    params = {name: load_ndarray(reader) for name in names}
    module_name = reader.string("module_name")
    reader.expect_end()
    return GraphExecutorFactory(graph_json, None, module_name, params)


def create_factory(graph_json: str, lib: Module, module_name: str, *name_value_pairs: Any):
    """``tvm.graph_executor_factory.create(json, lib, name, "p0", arr0, "p1", arr1, ...)``."""
    if len(name_value_pairs) % 2:
        raise TVMError("tvm.graph_executor_factory.create expects name/value pairs of params")
    params = dict(zip(name_value_pairs[::2], name_value_pairs[1::2]))
    return GraphExecutorFactory(graph_json, lib, module_name, params)


register_func("runtime.module.loadbinary_GraphExecutorFactory", load_factory, override=True)
register_func("tvm.graph_executor_factory.create", create_factory, override=True)
