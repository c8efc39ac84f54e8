"""ONNX converters: the ``ai.onnx.ml`` ops that are tensor programs.

Entry points: the converters registered (as ``"ai.onnx.ml.<op>"``) on import.

Binarizer and ArrayFeatureExtractor are one Relay op each. LabelEncoder with numeric keys and
values compares every element with the keys and picks the matching value (or the default);
string keys need a string dtype kiln does not have. TreeEnsemble's trees are constants, so
each tree becomes nested ``where``\\ s: a split node selects between its two subtrees' output
rows (``(samples, n_targets)``, a leaf being its weight on its target), and the trees'
rows are aggregated (sum, average, min, max).

Example
-------
>>> from kiln.relay.frontend import onnx_ops_ml
>>> from kiln.relay.frontend.onnx_registry import CONVERTERS
>>> "ai.onnx.ml.TreeEnsemble" in CONVERTERS
True
"""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.relay.frontend.onnx_registry import register_function, required, unsupported
from kiln.runtime.error import OpAttributeInvalid, TVMError

__all__: list[str] = []

ML = "ai.onnx.ml"


def _binarizer(inputs, attrs, ctx):
    x = inputs[0]
    dtype = ctx.dtype(x)
    threshold = relay.const(np.array(attrs.get("threshold", 0.0), dtype))
    return relay.cast(relay.greater(x, threshold), dtype)


def _array_feature_extractor(inputs, attrs, ctx):
    x, indices = inputs
    # ONNX Runtime's (and the reference's) rule: indices flatten; a 1-D input gives one row
    flat = relay.reshape(relay.cast(indices, "int64"), [-1])
    picked = relay.take(x, flat, axis=-1)
    if ctx.rank(x) == 1:
        return relay.expand_dims(picked, 0)
    return picked


def _label_encoder(inputs, attrs, ctx):
    x = inputs[0]
    keys = next((attrs[k] for k in ("keys_tensor", "keys_int64s", "keys_floats")
                 if k in attrs), None)
    if keys is None:
        if "keys_strings" in attrs:
            raise unsupported("LabelEncoder", "string keys")
        raise OpAttributeInvalid("ONNX LabelEncoder needs keys_int64s, keys_floats or "
                                 "keys_tensor")
    if "values_strings" in attrs or isinstance(attrs.get("values_tensor"), np.ndarray) and \
            attrs["values_tensor"].dtype.kind in "OSU":
        raise unsupported("LabelEncoder", "string values")
    if "values_tensor" in attrs:
        values = np.asarray(attrs["values_tensor"])
        default = np.asarray(attrs.get("default_tensor", np.zeros(1, values.dtype)))
        default = default.reshape(-1)[0]
    elif "values_int64s" in attrs:
        values = np.asarray(attrs["values_int64s"], "int64")
        default = np.int64(attrs.get("default_int64", -1))
    elif "values_floats" in attrs:
        values = np.asarray(attrs["values_floats"], "float32")
        default = np.float32(attrs.get("default_float", -0.0))
    else:
        raise OpAttributeInvalid("ONNX LabelEncoder needs values_int64s, values_floats or "
                                 "values_tensor")
    keys = np.asarray(keys).reshape(-1)
    values = values.reshape(-1)
    if keys.size != values.size:
        raise OpAttributeInvalid(f"ONNX LabelEncoder: {keys.size} keys but {values.size} "
                                 "values")
    rank = ctx.rank(x)
    key_axis = relay.const(keys.astype(ctx.dtype(x)).reshape((1,) * rank + (-1,)))
    matches = relay.equal(relay.expand_dims(x, rank), key_axis)
    if keys.dtype.kind == "f":  # the reference's dict lookup finds a NaN key for NaN
        nan_key = relay.const(np.isnan(keys).reshape((1,) * rank + (-1,)))
        matches = relay.logical_or(matches, relay.logical_and(
            relay.expand_dims(relay.isnan(x), rank), nan_key))
    # the first matching key wins, as a dict built from the pairs keeps the last: keys are
    # distinct in valid models, so either rule gives the same value
    chosen = relay.take(relay.const(values), relay.argmax(relay.cast(matches, "int32"),
                                                          axis=rank))
    return relay.where(relay.any(matches, axis=rank), chosen,
                       relay.const(np.array(default, values.dtype)))


register_function(f"{ML}.Binarizer", _binarizer)
register_function(f"{ML}.ArrayFeatureExtractor", _array_feature_extractor)
register_function(f"{ML}.LabelEncoder", _label_encoder)


# ---- TreeEnsemble ---------------------------------------------------------------------------
_MODES = {0: relay.less_equal, 1: relay.less, 2: relay.greater_equal, 3: relay.greater,
          4: relay.equal, 5: relay.not_equal}
_MEMBER = 6
_AGGREGATES = {0: "average", 1: "sum", 2: "min", 3: "max"}


class _Forest:
    """One TreeEnsemble's attributes, and each tree as a Relay expression of ``x``."""

    def __init__(self, attrs, x, dtype: str, ctx) -> None:
        def array(name, kind=None):
            value = required(attrs, name, "TreeEnsemble")
            return np.asarray(value if kind is None else np.asarray(value).astype(kind))

        self.x, self.dtype = x, dtype
        self.splits = array("nodes_splits", dtype)
        self.features = array("nodes_featureids", "int64")
        self.modes = array("nodes_modes", "int64")
        self.true_ids, self.false_ids = array("nodes_truenodeids"), array("nodes_falsenodeids")
        self.true_leafs, self.false_leafs = array("nodes_trueleafs"), array("nodes_falseleafs")
        self.targets = array("leaf_targetids", "int64")
        self.weights = array("leaf_weights", dtype)
        self.n_targets = int(required(attrs, "n_targets", "TreeEnsemble"))
        missing = attrs.get("nodes_missing_value_tracks_true")
        self.missing_true = np.asarray(missing if missing is not None
                                       else np.zeros(len(self.modes)), bool)
        self.members = self._member_sets(attrs.get("membership_values"))
        nodes = len(self.modes)
        if any(len(a) != nodes for a in (self.splits, self.features, self.true_ids,
                                         self.false_ids, self.true_leafs, self.false_leafs)):
            raise OpAttributeInvalid("ONNX TreeEnsemble: the nodes_* attributes differ in "
                                     "length")
        if len(self.targets) != len(self.weights) or \
                np.any((self.targets < 0) | (self.targets >= self.n_targets)):
            raise OpAttributeInvalid("ONNX TreeEnsemble: leaf_targetids must have one id in "
                                     f"[0, {self.n_targets}) per leaf weight")
        width = ctx.shape(x)[1]
        if isinstance(width, int) and np.any(self.features >= width):
            raise OpAttributeInvalid(f"ONNX TreeEnsemble: a node reads feature "
                                     f"{int(self.features.max())} of {width}")
        self.columns: dict[int, object] = {}

    def _member_sets(self, values) -> dict[int, np.ndarray]:
        """``{node: members}``: membership_values lists each BRANCH_MEMBER node's members in
        node order, NaN-delimited."""
        member_nodes = [i for i, m in enumerate(self.modes) if m == _MEMBER]
        if not member_nodes:
            return {}
        if values is None:
            raise OpAttributeInvalid("ONNX TreeEnsemble: BRANCH_MEMBER nodes need "
                                     "membership_values")
        values = np.asarray(values, self.dtype)
        groups, current = [], []
        for v in values:
            if np.isnan(v):
                groups.append(np.asarray(current, self.dtype))
                current = []
            else:
                current.append(v)
        if len(groups) != len(member_nodes):
            raise OpAttributeInvalid(f"ONNX TreeEnsemble: {len(member_nodes)} BRANCH_MEMBER "
                                     f"nodes but {len(groups)} member sets")
        return dict(zip(member_nodes, groups))

    def _column(self, feature: int):
        if feature not in self.columns:
            self.columns[feature] = relay.take(self.x, relay.const(feature, "int64"), axis=1)
        return self.columns[feature]

    def _condition(self, node: int):
        value = self._column(int(self.features[node]))
        mode = int(self.modes[node])
        if mode == _MEMBER:
            members = relay.const(self.members[node].reshape(1, -1))
            test = relay.any(relay.equal(relay.expand_dims(value, 1), members), axis=1)
        elif mode in _MODES:
            test = _MODES[mode](value, relay.const(self.splits[node]))
        else:
            raise OpAttributeInvalid(f"ONNX TreeEnsemble: node mode {mode} is not one of 0-6")
        if self.missing_true[node]:
            test = relay.logical_or(test, relay.isnan(value))
        return test

    def _leaf(self, leaf: int, neutral: float):
        if not 0 <= leaf < len(self.weights):
            raise OpAttributeInvalid(f"ONNX TreeEnsemble: leaf {leaf} does not exist")
        row = np.full(self.n_targets, neutral, self.dtype)
        row[self.targets[leaf]] = self.weights[leaf]
        return relay.const(row.reshape(1, -1))

    def tree(self, node: int, is_leaf: bool, neutral: float, depth: int = 0):
        """Rows ``(samples or 1, n_targets)`` the subtree at ``node`` gives each sample."""
        if is_leaf:
            return self._leaf(node, neutral)
        if depth > len(self.modes):
            raise OpAttributeInvalid("ONNX TreeEnsemble: the nodes form a cycle")
        if not 0 <= node < len(self.modes):
            raise OpAttributeInvalid(f"ONNX TreeEnsemble: node {node} does not exist")
        yes = self.tree(int(self.true_ids[node]), bool(self.true_leafs[node]), neutral,
                        depth + 1)
        no = self.tree(int(self.false_ids[node]), bool(self.false_leafs[node]), neutral,
                       depth + 1)
        return relay.where(relay.expand_dims(self._condition(node), 1), yes, no)


def _tree_ensemble(inputs, attrs, ctx):
    x = inputs[0]
    dtype = ctx.dtype(x)
    if ctx.rank(x) != 2 or dtype not in ("float32", "float64", "float16"):
        raise TVMError(f"TreeEnsemble: X must be a 2-D float tensor, got a {ctx.rank(x)}-D "
                       f"{dtype} one")
    if attrs.get("post_transform", 0) != 0:
        raise unsupported("TreeEnsemble", f"post_transform {attrs['post_transform']}")
    aggregate = _AGGREGATES.get(attrs.get("aggregate_function", 1))
    if aggregate is None:
        raise OpAttributeInvalid(f"ONNX TreeEnsemble: aggregate_function "
                                 f"{attrs['aggregate_function']} is not one of 0-3")
    forest = _Forest(attrs, x, dtype, ctx)
    info = np.finfo(dtype)
    neutral = {"min": info.max, "max": info.min}.get(aggregate, 0.0)
    roots = [int(r) for r in required(attrs, "tree_roots", "TreeEnsemble")]
    rows = []
    for root in roots:
        # a tree that is one leaf: both branches of its root name the same leaf
        lone = bool(forest.true_leafs[root] and forest.false_leafs[root] and
                    forest.true_ids[root] == forest.false_ids[root])
        rows.append(forest.tree(int(forest.true_ids[root]) if lone else root, lone, neutral))
    samples = relay.zeros_like(relay.take(x, relay.const([0], "int64"), axis=1))
    combine = {"min": relay.minimum, "max": relay.maximum}.get(aggregate, relay.add)
    total = rows[0]
    for row in rows[1:]:
        total = combine(total, row)
    if aggregate == "average":
        total = relay.divide(total, relay.const(np.array(len(rows), dtype)))
    return relay.add(total, samples)  # a tree of one leaf still gives one row per sample


register_function(f"{ML}.TreeEnsemble", _tree_ensemble, since=5)
