"""The Object system: type table, reflected fields, immutability."""

import pytest

from kiln.runtime.object import (
    Object,
    fields_of,
    is_instance_index,
    register_object,
    type_key_to_class,
    type_key_to_index,
)


@register_object("test.object.Base")
class _Base(Object):
    _fields = {"x": int, "name": str}


@register_object("test.object.Child")
class _Child(_Base):
    _fields = {"child": Object}
    _mutable_fields = frozenset({"cache_"})
    _extra_slots = ("cache_",)


def test_fields_are_declared_once_and_inherited_in_order():
    assert list(fields_of(_Child)) == ["x", "name", "child"]
    assert _Child.__slots__ == ("child", "cache_")
    c = _Child(1, "a", None)
    assert (c.x, c.name, c.child) == (1, "a", None)


def test_type_table_records_parent_child_relation():
    base, child = type_key_to_index("test.object.Base"), type_key_to_index("test.object.Child")
    assert base != child and child >= 64
    assert is_instance_index(child, base)
    assert not is_instance_index(base, child)
    assert is_instance_index(child, Object._type_index)
    assert type_key_to_class("test.object.Child") is _Child
    assert _Child(1, "a", None).type_key == "test.object.Child"


def test_objects_are_immutable_except_declared_caches():
    c = _Child(1, "a", None)
    with pytest.raises(AttributeError, match="immutable"):
        c.x = 2
    c.cache_ = 5
    assert c.cache_ == 5


def test_unknown_field_and_too_many_args_are_rejected():
    with pytest.raises(TypeError, match="no field 'y'"):
        _Base(y=1)
    with pytest.raises(TypeError, match="at most 2"):
        _Base(1, "a", 3)


def test_same_key_for_a_different_class_is_refused():
    with pytest.raises(ValueError, match="already registered"):

        @register_object("test.object.Base")
        class Other(Object):
            pass


def test_unknown_type_key_lookup_names_the_key():
    with pytest.raises(KeyError, match="no.such.Type"):
        type_key_to_index("no.such.Type")
