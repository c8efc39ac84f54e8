"""Global functions the RPC tests call on a server (in process, or run by a server process
with ``--init-module tests/rpc/remote_funcs.py``)."""

import time

import numpy as np

import kiln


def _fail(message):
    raise ValueError(f"remote failure: {message}")


def _scale_into(x, out, factor):
    out.copyfrom(x.numpy() * factor)


FUNCS = {
    "rpc_test.add": lambda a, b: a + b,
    "rpc_test.echo": lambda value: value,
    "rpc_test.concat": lambda text, blob: text.encode() + blob,
    "rpc_test.sleep": lambda seconds: time.sleep(seconds),
    "rpc_test.fail": _fail,
    "rpc_test.scale_into": _scale_into,
    "rpc_test.arange": lambda n, dtype: kiln.nd.array(np.arange(n).astype(dtype)),
    "rpc_test.sum": lambda x: float(x.numpy().astype("float64").sum()),
    "rpc_test.make_adder": lambda k: (lambda v: v + k),
    "rpc_test.apply": lambda f, v: f(v),
}

for _name, _func in FUNCS.items():
    kiln.register_func(_name, _func, override=True)
