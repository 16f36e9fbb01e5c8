"""Templates: typed and binary field lists, their plain-data form, and the mismatches they name."""

import struct

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import TRACE
from pastset import Template, TemplateMismatch


def test_typed_template_from_names_and_python_types():
    assert Template.typed("int", "str") == Template.typed(int, str) == Template.of(["int", "str"])
    assert Template.of(("float", "bytes", "bool", "any")).fields == ("float", "bytes", "bool", "any")


def test_binary_template_has_one_field_per_struct_code():
    t = Template.of(TRACE)
    assert t.is_binary and t.record_size == struct.calcsize(TRACE) == 36
    assert t.fields == ("H", "H", "I", "I", "I", "I", "Q", "Q")
    assert Template.binary("=2I4sxQ").fields == ("I", "I", "4s", "Q")


@pytest.mark.parametrize("spec", [["int", "bytes"], TRACE])
def test_spec_round_trips(spec):
    """The plain-data form is how a template travels on the wire."""
    assert Template.of(Template.of(spec).spec) == Template.of(spec)


@pytest.mark.parametrize("spec, words", [
    (["int", "complex"], ["field 1", "'complex'", "int, float, str, bytes, bool, any"]),
    ([], ["at least one field"]),
    ("HHI", ["'HHI'", "must start with '='"]),
    ("=Z", ["'=Z'"]),
    ("=", ["no fields"]),
    (42, ["42", "list of field types", "'='"]),
])
def test_bad_templates_are_named(spec, words):
    with pytest.raises(TemplateMismatch) as info:
        Template.of(spec)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("values, words", [
    ((1, 2), ["field 1", "expected str", "got int"]),
    ((True, "x"), ["field 0", "expected int", "got bool"]),
    ((1,), ["expected 2 fields", "got 1"]),
    (5, ["expected a tuple", "got int"]),
])
def test_typed_check_names_field_and_types(values, words):
    with pytest.raises(TemplateMismatch) as info:
        Template.of(["int", "str"]).check(values)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("values, words", [
    ((1, 2, "x"), ["field 2", "'I'", "str"]),
    ((1, 2), ["expected 3 fields", "got 2"]),
    ((1, 70_000, 3), ["field 1", "'H'", "70000"]),
    (7, ["expected a tuple", "got int"]),
])
def test_binary_check_names_field_and_types(values, words):
    with pytest.raises(TemplateMismatch) as info:
        Template.of("=HHI").check(values)
    for word in words:
        assert word in str(info.value)


def test_float_field_takes_an_int_and_any_takes_msgpack_values():
    assert Template.of(["float", "any"]).check((1, {"k": [1, None]})) == (1, {"k": [1, None]})
    with pytest.raises(TemplateMismatch, match="field 1 \\(any\\)"):
        Template.of(["float", "any"]).check((1.0, object()))


def test_unpack_needs_a_whole_record():
    t = Template.of("=HI")
    assert t.unpack(struct.pack("=HI", 1, 2)) == (1, 2)
    with pytest.raises(TemplateMismatch, match="6 bytes, got 5"):
        t.unpack(b"12345")
    with pytest.raises(TemplateMismatch, match="binary template"):
        Template.of(["int"]).unpack(b"1234")


# Values at every msgpack size boundary, and around them.
_EDGES = [0, 127, 128, 255, 256, 0xFFFF, 0x10000, 2 ** 32 - 1, 2 ** 32, 2 ** 64 - 1,
          -1, -32, -33, -128, -129, -(2 ** 15), -(2 ** 15) - 1, -(2 ** 31), -(2 ** 31) - 1, -(2 ** 63)]
_LENGTHS = [0, 31, 32, 255, 256, 0xFFFF, 0x10000]
_FIELD_VALUES = {
    "int": st.one_of(st.sampled_from(_EDGES), st.integers(-(2 ** 63), 2 ** 64 - 1)),
    "float": st.one_of(st.floats(allow_nan=False), st.sampled_from(_EDGES),
                       st.floats(allow_nan=False).map(np.float64)),   # a float subclass: packed as a float
    "bool": st.booleans(),
    "str": st.one_of(st.text(max_size=40), st.sampled_from(_LENGTHS).map(lambda n: "a" * n),
                     st.sampled_from(_LENGTHS).map(lambda n: "é" * (n // 2))),
    "bytes": st.one_of(st.binary(max_size=40), st.sampled_from(_LENGTHS).map(lambda n: b"x" * n)),
    "any": st.one_of(st.none(), st.integers(-100, 1000), st.lists(st.integers(-(2 ** 63), 2 ** 63), max_size=4),
                     st.dictionaries(st.text(max_size=3), st.binary(max_size=300), max_size=2)),
}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sizer_gives_the_length_of_the_msgpack_encoding(data):
    """What a typed tuple costs on the wire, computed without encoding it, is the encoding's length."""
    fields = data.draw(st.lists(st.sampled_from(list(_FIELD_VALUES)), min_size=1, max_size=20))
    template = Template.typed(*fields)
    values = template.check(tuple(data.draw(_FIELD_VALUES[f]) for f in fields))
    assert template.sizer()(values) == len(msgpack.packb(list(values), use_bin_type=True))
    assert template.sizer()(list(values)) == len(msgpack.packb(list(values), use_bin_type=True))


def test_sizer_of_a_binary_template_is_its_record_size():
    assert Template.of(TRACE).sizer()((1, 2, 3, 4, 5, 6, 7, 8)) == 36
