"""TVM's relay_quick_start tutorial flow, written for Apache TVM v0.16 (only ``import tvm``).

Run it on kiln without edits:
``python -m kiln.compat.tvm examples/tvm_scripts/relay_quick_start.py``.
Sizes are small (ResNet-18 on 3x32x32, about 25 s of CPU to build); the API calls are the
tutorial's.
"""

import numpy as np
import tvm
import tvm.relay.testing
import tvm.testing
from tvm import relay
from tvm.contrib import graph_executor, utils

batch_size = 1
num_class = 10
image_shape = (3, 32, 32)
data_shape = (batch_size,) + image_shape
out_shape = (batch_size, num_class)

mod, params = relay.testing.resnet.get_workload(
    num_layers=18, batch_size=batch_size, num_classes=num_class, image_shape=image_shape
)
print(mod.astext(show_meta_data=False)[:200])

opt_level = 3
target = tvm.target.Target("llvm")
with tvm.transform.PassContext(opt_level=opt_level):
    lib = relay.build(mod, target, params=params)

dev = tvm.cpu()
data = np.random.uniform(-1, 1, size=data_shape).astype("float32")
module = graph_executor.GraphModule(lib["default"](dev))
module.set_input("data", data)
module.run()
out = module.get_output(0, tvm.nd.empty(out_shape)).numpy()
print(out.flatten()[0:10])

# save the library, load it back, and run it again
temp = utils.tempdir()
path_lib = temp.relpath("deploy_lib.tar")
lib.export_library(path_lib)
print(temp.listdir())

loaded_lib = tvm.runtime.load_module(path_lib)
input_data = tvm.nd.array(data)
module = graph_executor.GraphModule(loaded_lib["default"](dev))
module.run(data=input_data)
out_deploy = module.get_output(0).numpy()
print(out_deploy.flatten()[0:10])
tvm.testing.assert_allclose(out_deploy, out, atol=1e-5, rtol=1e-5)

ftimer = module.module.time_evaluator("run", dev, number=2, repeat=2)
prof_res = np.array(ftimer().results) * 1000
print(f"Mean inference time (std dev): {np.mean(prof_res):.2f} ms ({np.std(prof_res):.2f} ms)")
