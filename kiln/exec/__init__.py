"""Command-line programs run with ``python -m kiln.exec.<name>`` (TVM's ``tvm.exec``):
``rpc_server``, ``rpc_tracker``, ``query_rpc_tracker``."""
