"""Relay analyses (TVM's ``tvm.relay.analysis``).

Entry points: :func:`free_vars`, :func:`bound_vars`, :func:`all_vars`, :func:`free_type_vars`,
:func:`bound_type_vars`, :func:`all_type_vars`, :func:`well_formed`, :func:`check_kind`,
:func:`post_order_visit`, :class:`CallGraph`, :func:`get_total_mac_number`,
:func:`count_layers`, :func:`unmatched_cases`, :class:`Feature`,
:func:`detect_feature`, :func:`check_constant`, :func:`extract_fused_functions`,
:func:`list_op_freqs`.

Names load lazily from the modules of this package; an analysis added by another module
registers here with one line in ``_LAZY``.
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "free_vars": ("kiln.relay.analysis.variables", "free_vars"),
    "bound_vars": ("kiln.relay.analysis.variables", "bound_vars"),
    "all_vars": ("kiln.relay.analysis.variables", "all_vars"),
    "free_type_vars": ("kiln.relay.analysis.variables", "free_type_vars"),
    "bound_type_vars": ("kiln.relay.analysis.variables", "bound_type_vars"),
    "all_type_vars": ("kiln.relay.analysis.variables", "all_type_vars"),
    "well_formed": ("kiln.relay.analysis.variables", "well_formed"),
    "check_kind": ("kiln.relay.analysis.kinds", "check_kind"),
    "post_order_visit": ("kiln.relay.expr_functor", "post_order_visit"),
    "CallGraph": ("kiln.relay.analysis.call_graph", "CallGraph"),
    "get_total_mac_number": ("kiln.relay.analysis.mac_count", "get_total_mac_number"),
    "count_layers": ("kiln.relay.analysis.mac_count", "count_layers"),
    "unmatched_cases": ("kiln.relay.analysis.match_check", "unmatched_cases"),
    "Feature": ("kiln.relay.analysis.features", "Feature"),
    "detect_feature": ("kiln.relay.analysis.features", "detect_feature"),
    "check_constant": ("kiln.relay.analysis.features", "check_constant"),
    "extract_fused_functions": ("kiln.relay.analysis.features", "extract_fused_functions"),
    "list_op_freqs": ("kiln.relay.analysis.features", "list_op_freqs"),
    "feature": "kiln.relay.analysis.features",
    "call_graph": "kiln.relay.analysis.call_graph",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
