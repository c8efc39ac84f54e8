"""TVM's ``tvm.contrib.debugger``: run a graph op by op, timing and dumping each node.

Entry point: :mod:`kiln.contrib.debugger.debug_executor`.
"""
