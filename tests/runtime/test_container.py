"""Runtime containers behave like the Python values they stand for, and are Objects."""

import pickle
from collections.abc import Mapping, Sequence

import pytest

from kiln.runtime.container import ADT, Array, Closure, Map, ShapeTuple, String, tuple_object
from kiln.runtime.object import Object, register_object, type_key_to_index


def test_static_type_indices_follow_tvm():
    keys = ["runtime.NDArray", "runtime.String", "runtime.Array", "runtime.Map",
            "runtime.ShapeTuple", "runtime.Closure", "runtime.ADT"]
    import kiln.runtime.ndarray  # noqa: F401 - registers runtime.NDArray

    assert [type_key_to_index(k) for k in keys] == [2, 3, 4, 5, 6, 10, 11]


def test_string_is_a_str_and_an_object():
    s = String("conv2d")
    assert isinstance(s, str) and isinstance(s, Object)
    assert s == "conv2d" and hash(s) == hash("conv2d") and {"conv2d": 1}[s] == 1
    assert s + "_nchw" == "conv2d_nchw" and s.startswith("conv")
    assert repr(s) == "'conv2d'" and s.type_key == "runtime.String"
    with pytest.raises(AttributeError, match="immutable"):
        s.extra = 1
    assert type(pickle.loads(pickle.dumps(s))) is String


def test_array_is_an_immutable_sequence_equal_to_lists_and_tuples():
    a = Array(x * 2 for x in range(4))
    assert isinstance(a, Sequence)
    assert a == [0, 2, 4, 6] and a == (0, 2, 4, 6) and [0, 2, 4, 6] == a
    assert a != [0, 2, 4] and a != [0, 2, 4, 7] and Array([1]) != Array([2])
    assert len(a) == 4 and a[-1] == 6 and list(a) == [0, 2, 4, 6] and 4 in a
    assert isinstance(a[1:3], Array) and a[1:3] == [2, 4]
    assert a.index(4) == 2 and a.count(2) == 1 and a + [8] == [0, 2, 4, 6, 8]
    assert hash(a) == hash((0, 2, 4, 6)) and repr(a) == "[0, 2, 4, 6]"
    with pytest.raises(TypeError):
        a[0] = 1
    with pytest.raises(AttributeError, match="immutable"):
        a._items = ()
    assert pickle.loads(pickle.dumps(a)) == a


def test_array_compares_nested_elements():
    assert Array([Array([1, 2]), "x"]) == [[1, 2], "x"]


def test_map_is_an_immutable_mapping_equal_to_dicts():
    m = Map({"axis": 1, "keepdims": True})
    assert isinstance(m, Mapping)
    assert m == {"keepdims": True, "axis": 1} and m != {"axis": 1}
    assert m["axis"] == 1 and m.get("missing", 5) == 5 and "axis" in m and len(m) == 2
    assert list(m.keys()) == ["axis", "keepdims"] and list(m.values()) == [1, True]
    assert dict(m.items()) == {"axis": 1, "keepdims": True}
    with pytest.raises(KeyError):
        m["missing"]
    with pytest.raises(TypeError):
        m["axis"] = 2
    assert pickle.loads(pickle.dumps(m)) == m


def test_map_accepts_object_keys_and_string_lookup_by_str():
    key = Closure()
    m = Map([(key, "f"), (String("name"), "g")])
    assert m[key] == "f" and m["name"] == "g"


def test_shape_tuple_is_a_tuple_of_ints():
    s = ShapeTuple([2, 3, 4])
    assert isinstance(s, tuple) and s == (2, 3, 4) and s == [2, 3, 4] and s != [2, 3]
    assert hash(s) == hash((2, 3, 4)) and s[1] == 3 and len(s) == 3
    assert s.type_key == "runtime.ShapeTuple"
    with pytest.raises(TypeError):
        ShapeTuple([2.5])
    assert type(pickle.loads(pickle.dumps(s))) is ShapeTuple


def test_adt_has_a_tag_and_fields():
    v = ADT(2, ["a", "b"])
    assert v.tag == 2 and v.fields == ("a", "b") and v[1] == "b" and len(v) == 2
    assert list(v) == ["a", "b"]
    t = tuple_object([1, 2, 3])
    assert t.tag == 0 and list(t) == [1, 2, 3] and t.type_key == "runtime.ADT"
    with pytest.raises(AttributeError, match="immutable"):
        t.tag = 1


def test_closure_is_the_base_for_vm_closures():
    @register_object("test.container.VMClosure")
    class VMClosure(Closure):
        _fields = {"func_index": int, "free_vars": Object}

    c = VMClosure(3, [1, 2])
    assert isinstance(c, Closure) and c.func_index == 3 and c.free_vars == [1, 2]


def test_adt_pickles_with_its_fields():
    v = pickle.loads(pickle.dumps(ADT(4, [1, "x"])))
    assert type(v) is ADT and v.tag == 4 and v.fields == (1, "x")


def test_public_names_resolve_through_kiln_runtime():
    import kiln

    assert kiln.runtime.String is String and kiln.runtime.Array is Array
    assert kiln.runtime.Map is Map and kiln.runtime.ShapeTuple is ShapeTuple
    assert kiln.runtime.ADT is ADT and kiln.runtime.tuple_object is tuple_object
    assert kiln.runtime.Closure is Closure
