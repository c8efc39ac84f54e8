"""Templates for the AutoTVM tests, in a module the measuring worker processes can import."""

from __future__ import annotations

import time

from kiln import autotvm, te, tir


@autotvm.template("test_autotvm.faulty_scale")
def faulty_scale(n, dtype):
    """``b = a * 3`` whose ``mode`` knob can also fail at instantiation, at compilation, or
    hang the build."""
    a = te.placeholder((n,), dtype, name="a")
    b = te.compute((n,), lambda i: a[i] * 3, name="b")
    s = te.create_schedule(b.op)
    cfg = autotvm.get_config()
    cfg.define_knob("mode", ["ok", "invalid", "uncompilable", "hang", "ok_split"])
    mode = cfg["mode"].val
    if mode == "invalid":
        cfg.raise_error("mode 'invalid' is rejected by the template")
    if mode == "hang":
        time.sleep(60)
    if mode == "ok_split":
        s[b].split(b.op.axis[0], factor=4)
    if mode == "uncompilable":
        return s, [a, "not a tensor", b]
    return s, [a, b]


@autotvm.template("test_autotvm.synthetic")
def synthetic(n, dtype):
    """A space of three splits and a knob (measured by a fake runner in the tests)."""
    a = te.placeholder((n, n), dtype, name="a")
    b = te.compute((n, n), lambda i, j: a[i, j] + 1, name="b")
    s = te.create_schedule(b.op)
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", n, num_outputs=2)
    cfg.define_split("tile_x", n, num_outputs=2)
    cfg.define_split("tile_z", n, num_outputs=2)
    cfg.define_knob("unroll", [0, 1, 2])
    cfg.add_flop(1e9)
    return s, [a, b]


# the C of each ``mode`` of test_autotvm.micro_faulty's step function
_MICRO_STEPS = {
    "ok": "static float kiln_test_step(float x) { return x + 1.0f; }",
    "fault": "static float kiln_test_step(float x) { __builtin_trap(); return x; }",
    "hang": "static float kiln_test_step(float x) { for (;;) __asm__ volatile(\"\"); }",
    # compiles for the host (kiln.build checks the C there) but not for the Cortex-M
    "device_error": "#ifdef __ARM_ARCH\n#error no step on this device\n#endif\n"
                    "static float kiln_test_step(float x) { return x; }",
}


@autotvm.template("test_autotvm.micro_faulty")
def micro_faulty(n):
    """``b = a + 1`` through a C step function whose ``mode`` knob can also fault on the
    device, hang it, or not compile for the device."""
    a = te.placeholder((n,), "float32", name="a")
    b = te.compute((n,), lambda i: tir.call_extern("float32", "kiln_test_step", a[i]),
                   name="b")
    s = te.create_schedule(b.op)
    cfg = autotvm.get_config()
    cfg.define_knob("mode", list(_MICRO_STEPS))
    s[b].pragma(b.op.axis[0], "import_c", _MICRO_STEPS[cfg["mode"].val])
    return s, [a, b]


def config_with(task, **want):
    """The first config of ``task`` whose knobs have the wanted values (split knobs by their
    last factor)."""
    space = task.config_space
    for index in range(len(space)):
        config = space.get(index)
        values = {k: (config[k].size[-1] if hasattr(config[k], "size") else config[k].val)
                  for k in want}
        if values == want:
            return config
    raise AssertionError(f"no config with {want}")
