"""The ``tvm`` alias: kiln's module objects under TVM's names, refusal to shadow silently."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tvm.contrib import graph_executor

import kiln
import kiln.compat

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def test_tvm_names_are_kiln_module_objects():
    import tvm.contrib.utils
    import tvm.relay.testing

    assert tvm is kiln
    assert tvm.relay is kiln.relay
    assert sys.modules["tvm.relay.testing"] is kiln.relay.testing
    assert graph_executor is kiln.contrib.graph_executor
    assert tvm.contrib.utils is sys.modules["kiln.contrib.utils"]
    # The module keeps its own spec: reloading or pickling by kiln's name still works.
    assert kiln.relay.__spec__.name == "kiln.relay"


def test_lazy_alias_module_resolves_to_its_kiln_home():
    import tvm.error

    assert tvm.error is sys.modules["kiln.runtime.error"]
    assert isinstance(tvm.relay.var("x"), kiln.relay.Var)


def test_missing_module_is_a_clear_import_error():
    with pytest.raises(ModuleNotFoundError, match=r"kiln has no counterpart of TVM's tvm\.nope"):
        import tvm.nope  # noqa: F401


def test_refuses_to_shadow_an_importable_apache_tvm(tmp_path, monkeypatch):
    fake = tmp_path / "tvm"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(kiln.compat.SHADOW_ENV, raising=False)
    kiln.compat.uninstall_tvm_alias()
    try:
        with pytest.raises(kiln.compat.ShadowingError, match="apache-tvm is importable") as err:
            kiln.compat.install_tvm_alias()
        assert str(fake) in str(err.value)
        assert isinstance(err.value, kiln.TVMError)
        assert "tvm" not in sys.modules
    finally:
        kiln.compat.install_tvm_alias(shadow=True)
    assert sys.modules["tvm"] is kiln


def test_python_dash_m_runs_an_unchanged_tvm_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import tvm
        from tvm import relay
        from tvm.contrib import graph_executor

        x = relay.var("x", shape=(2, 3), dtype="float32")
        mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x) * relay.const(2.0)))
        lib = relay.build(mod, target="c")
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        data = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
        m.set_input("x", data)
        m.run()
        np.save(sys.argv[1], m.get_output(0).numpy())
    """))
    out = tmp_path / "out.npy"
    subprocess.run([sys.executable, "-m", "kiln.compat.tvm", "--shadow-tvm", str(script),
                    str(out)], check=True, env=_env(), cwd=tmp_path, timeout=300)
    np.testing.assert_array_equal(np.load(out), [[0, 4, 0], [8, 0, 12]])


def test_pytest_plugin_runs_a_tvm_style_test_file(tmp_path):
    (tmp_path / "test_style.py").write_text(textwrap.dedent("""
        import tvm
        import tvm.testing
        import kiln

        def test_alias():
            assert tvm is kiln

        def test_per_target(target, dev):
            assert dev.exist

        @tvm.testing.requires_cuda
        def test_cuda_skips():
            raise AssertionError("ran without a CUDA device")
    """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "kiln.compat.pytest_plugin", "-p",
         "no:cacheprovider", "-q", "-rs", str(tmp_path / "test_style.py")],
        env=_env(KILN_SHADOW_TVM="1"), cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    targets = len(kiln.testing.enabled_targets())
    assert f"{1 + targets} passed, 1 skipped" in result.stdout
    assert "cuda tests disabled" in result.stdout


def test_relay_quick_start_script_runs_unchanged():
    script = os.path.join(REPO, "examples", "tvm_scripts", "relay_quick_start.py")
    out = subprocess.run([sys.executable, "-m", "kiln.compat.tvm", "--shadow-tvm", script],
                         env=_env(), capture_output=True, text=True, timeout=600,
                         check=True).stdout
    # The script checks the reloaded library against the in-memory one itself; here: it got
    # through every step of the tutorial.
    assert "['deploy_lib.tar']" in out and "Mean inference time (std dev):" in out


def test_porting_doc_status_table_is_current():
    from kiln.compat import status

    text = status.DOC.read_text()
    committed = text.split(status.BEGIN)[1].split(status.END)[0].strip()
    assert committed == status.render_table(), (
        "docs/porting_from_tvm.md's status table is stale: run "
        "'python -m kiln.compat.status --write'")
