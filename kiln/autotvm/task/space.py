"""Configuration spaces of AutoTVM templates: knobs, their entities, and index <-> config.

Entry points: :class:`ConfigSpace` (``define_split``, ``define_reorder``, ``define_annotate``,
``define_knob``, ``add_flop``, ``multi_filter``, ``get(index)``), :class:`ConfigEntity` (one
point of a space, ``to_json_dict`` / ``from_json_dict``), :class:`FallbackConfigEntity` (the
template's defaults when nothing is tuned), and the entities :class:`SplitEntity`,
:class:`ReorderEntity`, :class:`AnnotateEntity`, :class:`OtherOptionEntity`.

A space is the product of its knobs' spaces in definition order. A config's index is
mixed-radix with the **first-defined knob as the least significant digit** (TVM's
``point2knob``/``knob2point``), so indices written by TVM name the same configs here.

Example
-------
>>> from kiln.autotvm.task.space import ConfigSpace
>>> cfg = ConfigSpace()
>>> _ = cfg.define_split("tile_x", 16, num_outputs=2)
>>> cfg.define_knob("unroll", [True, False])
>>> len(cfg), cfg.get(6)["tile_x"].size, cfg.get(6)["unroll"].val
(10, [-1, 2], False)
"""

from __future__ import annotations

import itertools
import math
import random
from collections import OrderedDict
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["InstantiationError", "ConfigSpace", "ConfigEntity", "FallbackConfigEntity",
           "SplitSpace", "SplitEntity", "ReorderSpace", "ReorderEntity", "AnnotateSpace",
           "AnnotateEntity", "OtherOptionSpace", "OtherOptionEntity", "get_factors",
           "get_pow2s"]


class InstantiationError(TVMError):
    """A template cannot be instantiated with this config (TVM's name; measure error 1)."""


def _extent(axis: Any) -> int:
    """The length of a split axis: an int, an IterVar, or a te/tir range-bearing object."""
    if isinstance(axis, int):
        return axis
    dom = getattr(axis, "dom", None)
    if dom is not None:
        axis = dom.extent
    value = getattr(axis, "value", axis)
    if not isinstance(value, int):
        raise TVMError(f"cannot define a knob over {axis!r}: its extent must be a constant")
    return value


def get_factors(n: int) -> list[int]:
    """All divisors of ``n`` in increasing order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def get_pow2s(n: int) -> list[int]:
    """The powers of two not above ``n``."""
    return [2 ** k for k in range(max(n, 1).bit_length()) if 2 ** k <= n]


class SplitEntity:
    """Split sizes ``[-1, f1, ..., fn-1]`` (outer size inferred) of one axis."""

    def __init__(self, size: list[int]) -> None:
        self.size = list(size)

    def apply(self, sch: Any, op: Any, axis: Any) -> list:
        """Split ``axis`` of ``op``'s stage into ``len(size)`` axes, outer to inner."""
        stage = sch[op]
        outs = []
        for i in range(1, len(self.size)):
            axis, inner = stage.split(axis, factor=math.prod(self.size[i:]))
            outs.append(axis)
            axis = inner
        return outs + [axis]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SplitEntity) and self.size == other.size

    def __repr__(self) -> str:
        return f"sp{self.size}"


class ReorderEntity:
    """A permutation of axes."""

    def __init__(self, perm: list[int]) -> None:
        self.perm = list(perm)

    def apply(self, sch: Any, op: Any, axes: list) -> list:
        ordered = [axes[i] for i in self.perm]
        sch[op].reorder(*ordered)
        return ordered

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReorderEntity) and self.perm == other.perm

    def __repr__(self) -> str:
        return f"re{self.perm}"


class AnnotateEntity:
    """One annotation per axis: ``none``, ``unroll`` or ``vec``."""

    def __init__(self, anns: list[str]) -> None:
        self.anns = list(anns)

    def apply(self, sch: Any, op: Any, axes: list, **_: Any) -> None:
        stage = sch[op]
        for axis, ann in zip(axes, self.anns):
            if ann == "unroll":
                stage.unroll(axis)
            elif ann == "vec":
                stage.vectorize(axis)
            elif ann != "none":
                raise TVMError(f"annotation {ann!r} is not supported on CPU targets")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnnotateEntity) and self.anns == other.anns

    def __repr__(self) -> str:
        return f"an{self.anns}"


class OtherOptionEntity:
    """The value of a ``define_knob`` knob."""

    def __init__(self, val: Any) -> None:
        self.val = val

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OtherOptionEntity) and self.val == other.val

    def __repr__(self) -> str:
        return str(self.val)


class TransformSpace:
    """The entities one knob can take."""

    num_output = 0

    def __init__(self) -> None:
        self.entities: list = []

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, index: int) -> Any:
        return self.entities[index]


class SplitSpace(TransformSpace):
    """``num_outputs``-way splits of one axis (policies ``factors``, ``power2``, ``verbose``,
    ``candidate``), pruned by ``filter``; tails are allowed only where ``no_tail`` is false."""

    def __init__(self, axes: list, policy: str, num_outputs: int = 2,
                 max_factor: int = 1 << 31, filter: Any = None, no_tail: bool | None = None,
                 candidate: list | None = None) -> None:
        super().__init__()
        if len(axes) != 1:
            raise TVMError("define_split takes one axis")
        self.product = _extent(axes[0])
        self.num_output = num_outputs
        self.policy = policy
        if policy == "candidate":
            if not candidate:
                raise TVMError("define_split(policy='candidate') needs candidate=[[...], ...]")
            self.entities = [SplitEntity(list(c)) for c in candidate]
            return
        if policy == "factors":
            factors = get_factors(self.product)
        elif policy == "power2":
            factors = get_pow2s(self.product)
        elif policy == "verbose":
            factors = sorted(set(get_factors(self.product)) | set(get_pow2s(self.product)))
        else:
            raise TVMError(f"define_split: unknown policy {policy!r} "
                           "(factors, power2, verbose, candidate)")
        self.factors = [f for f in factors if f <= max_factor]
        no_tail = policy == "factors" if no_tail is None else no_tail
        self._generate(1, [], no_tail)
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]
        if not self.entities:
            raise TVMError(f"define_split over {self.product}: no split passes the filter")

    def _generate(self, depth: int, stack: list[int], no_tail: bool) -> None:
        # inner sizes innermost-last; the outermost size is -1 (inferred)
        if depth == self.num_output:
            self.entities.append(SplitEntity([-1] + stack[::-1]))
            return
        used = math.prod(stack)
        for f in self.factors:
            total = used * f
            if total > self.product or (no_tail and self.product % total):
                continue
            self._generate(depth + 1, stack + [f], no_tail)

    def __repr__(self) -> str:
        return f"Split(policy={self.policy}, product={self.product}, num_outputs=" \
               f"{self.num_output}) len={len(self)}"


class ReorderSpace(TransformSpace):
    """Permutations of ``axes``: ``identity``, ``all``, ``interval_all`` or ``candidate``."""

    def __init__(self, axes: list, policy: str, interval: tuple | None = None,
                 candidate: list | None = None) -> None:
        super().__init__()
        n = len(axes)
        self.num_output = n
        if policy == "identity":
            perms = [list(range(n))]
        elif policy == "all":
            perms = [list(p) for p in itertools.permutations(range(n))]
        elif policy == "interval_all":
            begin, end = interval
            perms = [list(range(begin)) + list(p) + list(range(end, n))
                     for p in itertools.permutations(range(begin, end))]
        elif policy == "candidate":
            index = {id(a): i for i, a in enumerate(axes)}
            perms = [[index[id(a)] for a in c] for c in candidate]
        else:
            raise TVMError(f"define_reorder: unknown policy {policy!r} "
                           "(identity, all, interval_all, candidate)")
        self.entities = [ReorderEntity(p) for p in perms]


class AnnotateSpace(TransformSpace):
    """Annotations per axis from a policy made of ``unroll`` / ``vec`` / ``none``, where
    ``try_`` allows none too (``try_unroll_vec``: the last axis may be vectorized, the
    others unrolled; at most one ``vec``)."""

    def __init__(self, axes: list, policy: str) -> None:
        super().__init__()
        n = len(axes)
        self.num_output = n
        choices = {
            "none": [["none"] * n],
            "unroll": [["unroll"] * n],
            "vec": [["none"] * (n - 1) + ["vec"]],
            "try_unroll": [["unroll" if b else "none" for b in bits]
                           for bits in itertools.product((False, True), repeat=n)],
            "try_vec": [["none"] * n, ["none"] * (n - 1) + ["vec"]],
        }
        if policy == "try_unroll_vec":
            heads = choices["try_unroll"] if n > 1 else [[]]
            heads = [h[: n - 1] for h in heads] if n > 1 else heads
            unique = [list(h) for h in dict.fromkeys(tuple(h) for h in heads)]
            anns = [h + [last] for h in unique for last in ("none", "unroll", "vec")]
        elif policy in choices:
            anns = choices[policy]
        else:
            raise TVMError(f"define_annotate: unknown policy {policy!r} "
                           f"({', '.join([*choices, 'try_unroll_vec'])})")
        self.entities = [AnnotateEntity(a) for a in anns]


class OtherOptionSpace(TransformSpace):
    """The candidate values of a ``define_knob`` knob."""

    def __init__(self, candidate: list) -> None:
        super().__init__()
        if not candidate:
            raise TVMError("define_knob needs at least one candidate")
        self.entities = [OtherOptionEntity(c) for c in candidate]

    def __repr__(self) -> str:
        return f"OtherOption({[e.val for e in self.entities]}) len={len(self)}"


_KIND = {SplitEntity: "sp", ReorderEntity: "re", AnnotateEntity: "an", OtherOptionEntity: "ot"}


class ConfigSpace:
    """The knobs a template defines; when collecting, each ``define_*`` adds a knob.

    ``cfg[name]`` is the knob's current entity (the first one while the space is built).
    """

    is_fallback = False

    def __init__(self) -> None:
        self.space_map: OrderedDict[str, TransformSpace] = OrderedDict()
        self._entity_map: OrderedDict[str, Any] = OrderedDict()
        self._collect = True
        self._filters: list = []
        self._valid: list[int] | None = None
        self.flop = 0
        self.code_hash = None
        self.errors: list[str] = []

    # ---- defining knobs ----

    def define_split(self, name: str, axis: Any, policy: str = "factors", **kwargs: Any):
        """A ``num_outputs``-way split of ``axis`` (an IterVar or an extent)."""
        return self._add(name, lambda: SplitSpace([axis], policy, **kwargs))

    def define_reorder(self, name: str, axes: list, policy: str, **kwargs: Any):
        """A permutation of ``axes``."""
        return self._add(name, lambda: ReorderSpace(axes, policy, **kwargs))

    def define_annotate(self, name: str, axes: list, policy: str):
        """Per-axis annotations (unroll / vectorize)."""
        return self._add(name, lambda: AnnotateSpace(axes, policy))

    def define_knob(self, name: str, candidate: list) -> None:
        """A knob taking one of ``candidate``'s values (``cfg[name].val``)."""
        self._add(name, lambda: OtherOptionSpace(candidate))

    def _add(self, name: str, make: Any) -> Any:
        if self._collect and not (self.is_fallback and name in self._entity_map):
            space = make()
            self.space_map[name] = space
            self._entity_map[name] = space[0]
            self._valid = None
            self._dims = None
        return self._entity_map.get(name)

    def add_flop(self, flop: float) -> None:
        """Count ``flop`` floating point operations (for GFLOPS)."""
        self.flop += float(flop)

    def raise_error(self, msg: str) -> None:
        """Record that this config is invalid (instantiation fails with ``msg``)."""
        self.errors.append(msg)

    def valid(self) -> bool:
        """Whether instantiation recorded no error."""
        return not self.errors

    def multi_filter(self, filter: Any) -> None:  # noqa: A002 (TVM's name)
        """Keep only configs for which ``filter(entity)`` holds (over knob combinations)."""
        self._filters.append(filter)
        self._valid = None

    # ---- index arithmetic ----

    @property
    def dims(self) -> list[int]:
        """The number of entities of each knob, in definition order."""
        if getattr(self, "_dims", None) is None:
            self._dims = [len(s) for s in self.space_map.values()]
        return self._dims

    @property
    def range_length(self) -> int:
        """The product of the knobs' sizes (valid or not)."""
        return math.prod(self.dims)

    def point2knob(self, point: int) -> list[int]:
        """Knob indices of config ``point`` (first knob least significant)."""
        knob = []
        for dim in self.dims:
            knob.append(point % dim)
            point //= dim
        return knob

    def knob2point(self, knob: list[int]) -> int:
        """The config index of knob indices ``knob``."""
        point, scale = 0, 1
        for k, dim in zip(knob, self.dims):
            point += k * scale
            scale *= dim
        return point

    def _valid_indices(self) -> list[int] | None:
        if not self._filters:
            return None
        if self._valid is None:
            self._valid = [i for i in range(self.range_length) if self.is_index_valid(i)]
        return self._valid

    def is_index_valid(self, index: int) -> bool:
        """Whether config ``index`` passes every ``multi_filter``."""
        if not 0 <= index < self.range_length:
            return False
        if not self._filters:
            return True
        entity = self.get(index)
        return all(f(entity) for f in self._filters)

    def __len__(self) -> int:
        valid = self._valid_indices()
        return self.range_length if valid is None else len(valid)

    def get(self, index: int) -> ConfigEntity:
        """The config at ``index``."""
        if not 0 <= index < max(self.range_length, 1):
            raise TVMError(f"config index {index} is out of the space's range "
                           f"[0, {self.range_length})")
        entities = OrderedDict((name, space[k]) for (name, space), k in
                               zip(self.space_map.items(), self.point2knob(index)))
        return ConfigEntity(index, self.code_hash, entities, [])

    def get_rand_index(self, rng: random.Random | None = None,
                       to_exclude: set | None = None) -> int:
        """A random valid index not in ``to_exclude``."""
        rng = rng or random
        valid = self._valid_indices()
        to_exclude = to_exclude or set()
        for _ in range(1000):
            index = rng.choice(valid) if valid is not None else rng.randrange(
                self.range_length)
            if index not in to_exclude:
                return index
        rest = [i for i in (valid or range(self.range_length)) if i not in to_exclude]
        if not rest:
            raise TVMError("every config of the space is excluded")
        return rng.choice(rest)

    def random_walk(self, point: int, rng: random.Random | None = None) -> int:
        """A neighbour of ``point``: one knob redrawn (to a different value where it can)."""
        rng = rng or random
        knob = self.point2knob(point)
        movable = [i for i, d in enumerate(self.dims) if d > 1]
        if not movable:
            return point
        for _ in range(32):
            i = rng.choice(movable)
            knob[i] = rng.randrange(self.dims[i])
            new = self.knob2point(knob)
            if new != point and self.is_index_valid(new):
                return new
        return point

    def __iter__(self):
        return iter(self._entity_map)

    def __getitem__(self, name: str) -> Any:
        return self._entity_map[name]

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, range_length={self.range_length}, space_map="]
        lines += [f"  {i:2d} {name}: {space!r}"
                  for i, (name, space) in enumerate(self.space_map.items())]
        return "\n".join(lines) + ")"


class ConfigEntity(ConfigSpace):
    """One config of a space: an index and the entity of every knob."""

    def __init__(self, index: int, code_hash: Any, entity_map: OrderedDict,
                 constraints: list) -> None:
        super().__init__()
        self.index = index
        self._collect = False
        self._entity_map = entity_map
        self._space_map = None
        self._constraints = constraints
        self.code_hash = code_hash
        self.cost: float | None = None

    def get_flatten_feature(self) -> list[float]:
        """The knob values as numbers (split sizes, permutation, one-hot annotations, knob
        values): the ``knob`` feature of the cost model."""
        features: list[float] = []
        for entity in self._entity_map.values():
            if isinstance(entity, SplitEntity):
                features.extend(float(s) for s in entity.size)
            elif isinstance(entity, ReorderEntity):
                features.extend(float(p) for p in entity.perm)
            elif isinstance(entity, AnnotateEntity):
                for ann in entity.anns:
                    features.extend(float(ann == c) for c in ("none", "unroll", "vec"))
            else:
                val = entity.val
                features.append(float(val) if isinstance(val, int | float | bool)
                                else float(hash(str(val)) % 997))
        return features

    def get_other_option(self) -> dict:
        """The ``define_knob`` values by name."""
        return {name: e.val for name, e in self._entity_map.items()
                if isinstance(e, OtherOptionEntity)}

    def to_json_dict(self) -> dict:
        """``{"index", "code_hash", "entity": [[name, kind, args], ...]}`` (TVM's record)."""
        entity = []
        for name, e in self._entity_map.items():
            kind = _KIND[type(e)]
            args = {"sp": "size", "re": "perm", "an": "anns", "ot": "val"}[kind]
            entity.append([name, kind, getattr(e, args)])
        return {"index": self.index, "code_hash": self.code_hash, "entity": entity}

    @staticmethod
    def from_json_dict(json_dict: dict) -> ConfigEntity:
        """Rebuild a config from :meth:`to_json_dict`'s form."""
        try:
            index, code_hash = int(json_dict["index"]), json_dict.get("code_hash")
            entity_map: OrderedDict[str, Any] = OrderedDict()
            for name, kind, args in json_dict["entity"]:
                maker = {"sp": SplitEntity, "re": ReorderEntity, "an": AnnotateEntity,
                         "ot": OtherOptionEntity}.get(kind)
                if maker is None:
                    raise TVMError(f"config entity {name!r} has unknown kind {kind!r}")
                if kind != "ot" and not isinstance(args, list):
                    raise TVMError(f"config entity {name!r} ({kind}) needs a list, got "
                                   f"{args!r}")
                entity_map[str(name)] = maker(args)
        except (KeyError, TypeError, ValueError) as err:
            raise TVMError(f"malformed AutoTVM config {json_dict!r}: {err}") from None
        return ConfigEntity(index, code_hash, entity_map, [])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and \
            list(self._entity_map.items()) == list(other._entity_map.items())

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"{dict(self._entity_map)},{self.code_hash},{self.index}"


class FallbackConfigEntity(ConfigSpace):
    """The config used when nothing is tuned: each knob's first entity unless the template
    sets a default (``fallback_split`` or ``cfg[name] = entity``)."""

    is_fallback = True

    def fallback_split(self, name: str, constraints: list[int]) -> None:
        """Set split ``name`` to the largest divisors not above ``constraints`` (innermost
        chosen first)."""
        space = self.space_map[name]
        if not isinstance(space, SplitSpace):
            raise TVMError(f"{name!r} is not a split knob")
        if len(constraints) != space.num_output:
            raise TVMError(f"fallback_split({name!r}) needs {space.num_output} limits")
        sizes = [1] * space.num_output
        rest = space.product
        for i in reversed(range(space.num_output)):
            sizes[i] = max(d for d in get_factors(rest) if d <= max(constraints[i], 1))
            rest //= sizes[i]
        sizes[0] = -1
        self._entity_map[name] = SplitEntity(sizes)

    def __setitem__(self, name: str, entity: Any) -> None:
        self._entity_map[name] = entity

    def __repr__(self) -> str:
        return f"{dict(self._entity_map)},{self.code_hash}"
