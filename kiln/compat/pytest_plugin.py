"""pytest plugin ``-p kiln.compat.pytest_plugin``: test files that ``import tvm`` run on kiln.

The alias is installed when the plugin loads, before any conftest or test module is imported;
TVM's own test plugin (``tvm.testing.plugin``: target/dev parametrization, markers) comes with
it. Set ``KILN_SHADOW_TVM=1`` to shadow an installed apache-tvm.
"""

from __future__ import annotations

from kiln.compat import install_tvm_alias

install_tvm_alias()

pytest_plugins = ["kiln.testing.plugin"]
