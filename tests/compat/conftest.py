"""tests/compat: TVM-style tests (``import tvm``) run on kiln through the compatibility alias.

The alias is installed here, before the test modules import ``tvm``; ``shadow=True`` because
these tests are about kiln even where apache-tvm is also installed. TVM's test plugin hooks
(target parametrization, ``dev``, correlated parameters) come from ``kiln.testing.plugin``.
"""

from kiln.compat import install_tvm_alias

install_tvm_alias(shadow=True)

from kiln.testing.plugin import dev, pytest_configure, pytest_generate_tests  # noqa: E402

__all__ = ["dev", "pytest_configure", "pytest_generate_tests"]
