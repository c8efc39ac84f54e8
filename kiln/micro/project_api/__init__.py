"""microTVM's Project API (TVM's ``tvm.micro.project_api``): JSON-RPC 2.0 between the host and a
template project's ``microtvm_api_server.py``. See :mod:`.server` and :mod:`.client`."""
