"""TVM's ``tvm.contrib.cuda_graph``: importable, and refusing as TVM built without CUDA graphs.

kiln has no CUDA backend, so no CUDA graph executor can exist; see
:mod:`~kiln.contrib.cuda_graph.cuda_graph_executor`.
"""
