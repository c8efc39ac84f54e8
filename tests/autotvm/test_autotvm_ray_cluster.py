"""measure_option(cluster=...): tuning on a separately started Ray cluster, joined by address."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from kiln import autotvm  # noqa: E402
from kiln.runtime.error import TVMError  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head node in a process group of its own (``ray start --head --block``) with a
    token of its own; yields its address and the environment a driver needs to join it.
    Stopped by the group's id (``ray stop`` would stop every Ray on the machine)."""
    ray_cli = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    # Ray's unix sockets live under the temp dir: pytest's tmp_path is too long for them
    temp = tempfile.mkdtemp(prefix="kray_", dir="/tmp")
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen(
        [ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head exited or did not listen on {address}")
            time.sleep(0.5)
        yield address, env
    finally:
        # SIGTERM would drain the node for up to 30 s; nothing here needs draining. Ray's
        # daemons also die with their parent (they share its fate), the group covers the rest
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(30)
        shutil.rmtree(temp, ignore_errors=True)


# The driver runs in a process of its own: a Ray driver joins one cluster per process, and
# the other Ray tests of this session may have started one in the test process.
DRIVER = """
import sys
import ray
from kiln import autotvm, te

address, log = sys.argv[1:]
x, w = te.placeholder((2, 32)), te.placeholder((16, 32))
task = autotvm.task.create("dense_pack.x86", (x, w, None, "float32"), "c")
option = autotvm.measure_option(
    builder=autotvm.LocalBuilder(timeout=60),
    runner=autotvm.LocalRunner(number=3, repeat=1, cooldown_interval=0, timeout=60),
    cluster="ray:" + address)
assert type(option["builder"]).__name__ == "RayBuilder", option
assert option["runner"].number == 3 and option["runner"].repeat == 1
# joined the head's cluster (not a new local one): its one node and two CPUs
port = address.rsplit(":", 1)[1]
assert ray.get_runtime_context().gcs_address.endswith(":" + port)
assert option["builder"].n_parallel == 2 and len(option["runner"].timers) == 1
tuner = autotvm.tuner.GridSearchTuner(task)
tuner.tune(3, option, callbacks=[autotvm.callback.log_to_file(log)])
assert tuner.best_flops > 0
"""


def test_measure_option_cluster_tunes_on_a_ray_head_joined_by_address(ray_head, tmp_path):
    address, env = ray_head
    log = tmp_path / "cluster.log"
    root = str(Path(__file__).resolve().parents[2])
    env = {**env, "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    done = subprocess.run([sys.executable, "-c", DRIVER, address, str(log)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == 3 and all(r.error_no == 0 for _, r in records)


@pytest.mark.parametrize("cluster", ["dask", "ray:", "", "RAY"])
def test_measure_option_refuses_an_unknown_cluster(cluster):
    with pytest.raises(TVMError, match="cluster must be 'ray'"):
        autotvm.measure_option("local", "local", cluster=cluster)


def test_measure_option_cluster_refuses_a_runner_that_measures_elsewhere():
    runner = autotvm.RPCRunner("key", "127.0.0.1", 9190)
    with pytest.raises(TVMError, match="moves a LocalRunner onto Ray; got RPCRunner"):
        autotvm.measure_option("local", runner, cluster="ray:127.0.0.1:1")
