"""Types and attributes: printing, normalisation and text round trips."""

import math

import pytest

from spmdc.ir import (
    ArrayAttr,
    BoolAttr,
    DenseAttr,
    DictAttr,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    TypeAttr,
    UnitAttr,
    parse_module,
    print_module,
)
from spmdc.ir.attributes import attr, format_attr_dict, format_float, unwrap


def roundtrip_attr(a):
    """Print ``a`` as a module attribute, parse it back, return the parsed attribute."""
    m = parse_module("module {}")
    m.attributes["k"] = a
    text = print_module(m)
    m2 = parse_module(text)
    assert print_module(m2) == text
    return m2.attributes["k"]


# -- types ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,elt,text,rank,nbytes", [
    ((8, 16), "f32", "tensor<8x16xf32>", 2, 512),
    ((), "f32", "tensor<f32>", 0, 4),
    ((3,), "bf16", "tensor<3xbf16>", 1, 6),
    ((2, 0, 5), "i64", "tensor<2x0x5xi64>", 3, 0),
    ((7,), "i1", "tensor<7xi1>", 1, 7),
    ((2, 2), "f64", "tensor<2x2xf64>", 2, 32),
])
def test_tensor_type(shape, elt, text, rank, nbytes):
    t = TensorType(shape, elt)
    assert str(t) == text and t.rank == rank and t.num_bytes == nbytes
    assert t.num_elements == math.prod(shape)
    assert t == TensorType(list(shape), elt) and hash(t) == hash(TensorType(tuple(shape), elt))


def test_tensor_type_helpers_and_errors():
    t = TensorType((2, 3), "f16")
    assert t.is_float and not t.with_element_type("i8").is_float
    assert str(t.with_shape([6])) == "tensor<6xf16>"
    with pytest.raises(ValueError, match="unknown element type 'f3'"):
        TensorType((2,), "f3")


def test_function_type_printing():
    a, b = TensorType((4,), "f32"), TensorType((), "i1")
    assert str(FunctionType((a,), (a,))) == "(tensor<4xf32>) -> tensor<4xf32>"
    assert str(FunctionType((a, b), (a, b))) == "(tensor<4xf32>, tensor<i1>) -> (tensor<4xf32>, tensor<i1>)"
    assert str(FunctionType((), ())) == "() -> ()"


# -- scalars -------------------------------------------------------------------------------

@pytest.mark.parametrize("value,text", [
    (1e-05, "1.0e-05"), (1e20, "1.0e+20"), (1.5, "1.5"), (3.0, "3.0"), (-0.0, "-0.0"),
    (float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "nan"),
    (0.1, "0.1"), (5e-324, "5.0e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
])
def test_float_format_round_trip(value, text):
    assert format_float(value) == text == str(FloatAttr(value))
    back = roundtrip_attr(FloatAttr(value))
    assert isinstance(back, FloatAttr)
    if math.isnan(value):
        assert math.isnan(back.value)
    else:
        assert back.value == value and math.copysign(1, back.value) == math.copysign(1, value)


@pytest.mark.parametrize("value", [
    "plain", "", 'quote " inside', "back\\slash", "new\nline\ttab", "nul\x00ctl\x1f",
    "unicode é ☃ \u2028", "// not a comment", "#shard<@m, [R]>",
])
def test_string_escaping_round_trip(value):
    a = StringAttr(value)
    text = str(a)
    assert text.startswith('"') and text.endswith('"') and "\n" not in text
    assert roundtrip_attr(a) == a


def test_scalar_attrs_print():
    assert str(IntegerAttr(-3)) == "-3"
    assert str(BoolAttr(True)) == "true" and str(BoolAttr(False)) == "false"
    assert str(SymbolRefAttr("mesh")) == "@mesh"
    assert str(SymbolRefAttr("a-b.c")) == "@a-b.c"
    assert str(SymbolRefAttr("odd name")) == '@"odd name"'
    assert str(SymbolRefAttr("9lives")) == '@"9lives"'
    assert str(TypeAttr(TensorType((2,), "i8"))) == "tensor<2xi8>"
    assert roundtrip_attr(IntegerAttr(2 ** 70)) == IntegerAttr(2 ** 70)
    assert roundtrip_attr(SymbolRefAttr("odd name")) == SymbolRefAttr("odd name")
    assert roundtrip_attr(SymbolRefAttr("a-b.c")) == SymbolRefAttr("a-b.c")


# -- dictionaries and unit -----------------------------------------------------------------

def test_dict_attr_sorted_printing_and_unit_as_bare_key():
    d = DictAttr.of({"zeta": IntegerAttr(1), "alpha": UnitAttr(), "mid": StringAttr("x")})
    assert str(d) == '{alpha, mid = "x", zeta = 1}'
    assert [k for k, _ in d.entries] == ["alpha", "mid", "zeta"]
    assert d.get("mid") == StringAttr("x") and d.get("nope") is None
    assert DictAttr.of({"b": UnitAttr(), "a": UnitAttr()}) == DictAttr.of({"a": UnitAttr(), "b": UnitAttr()})
    assert str(DictAttr(())) == "{}"
    assert roundtrip_attr(d) == d


def test_attr_dict_keys_that_need_quotes():
    # '-' is allowed in symbols but not in bare dictionary keys
    attrs = {"a-b": UnitAttr(), "9x": IntegerAttr(1), "": UnitAttr(), "é": UnitAttr(),
             "ok.key$1": IntegerAttr(2)}
    text = format_attr_dict(attrs)
    assert text == '{"", "9x" = 1, "a-b", ok.key$1 = 2, "é"}'
    m = parse_module("module {}")
    m.attributes.update(attrs)
    m2 = parse_module(print_module(m))
    assert m2.attributes == attrs


@pytest.mark.parametrize("key", ["true", "false", "unit", "loc", "dense", "module", "attributes",
                                 "R", "S", "P", "inf", "nan", "tensor", "func.func", "shard.mesh"])
def test_keyword_like_keys_round_trip(key):
    m = parse_module("module {}")
    m.attributes[key] = IntegerAttr(1)
    m.attributes["flag_" + key] = UnitAttr()
    assert parse_module(print_module(m)).attributes == m.attributes


def test_array_nested_and_type_attrs_round_trip():
    a = ArrayAttr((IntegerAttr(1), ArrayAttr(()), DictAttr.of({"k": BoolAttr(False)}), StringAttr("s"),
                   TypeAttr(TensorType((2, 3), "bf16")),
                   TypeAttr(FunctionType((TensorType((2,), "f32"),), (TensorType((), "i1"),) * 2))))
    assert str(a) == '[1, [], {k = false}, "s", tensor<2x3xbf16>, (tensor<2xf32>) -> (tensor<i1>, tensor<i1>)]'
    assert roundtrip_attr(a) == a


def test_attr_and_unwrap_helpers():
    a = attr({"dims": [0, 1], "keep": True, "s": "x", "f": 1.5})
    assert a == DictAttr.of({"dims": ArrayAttr((IntegerAttr(0), IntegerAttr(1))), "keep": BoolAttr(True),
                             "s": StringAttr("x"), "f": FloatAttr(1.5)})
    assert unwrap(a) == {"dims": [0, 1], "keep": True, "s": "x", "f": 1.5}
    assert attr(True) == BoolAttr(True)  # bool is not an int here
    assert unwrap(SymbolRefAttr("m")) == "m"
    with pytest.raises(TypeError):
        attr(object())


# -- dense ---------------------------------------------------------------------------------

def test_dense_splat_normalisation():
    t = TensorType((2, 3), "f32")
    d = DenseAttr(t, [1.0] * 6)
    assert d.values == (1.0,) and d.is_splat and str(d) == "dense<1.0> : tensor<2x3xf32>"
    assert d == DenseAttr(t, (1,))  # ints normalised to floats
    assert d.flat_values() == [1.0] * 6
    # -0.0 and 0.0 compare equal but are different values: no splat
    z = DenseAttr(TensorType((2,), "f32"), (0.0, -0.0))
    assert not z.is_splat and str(z) == "dense<[0.0, -0.0]> : tensor<2xf32>"
    n = DenseAttr(TensorType((3,), "f32"), (float("nan"),) * 3)
    assert str(n) == "dense<nan> : tensor<3xf32>"


def test_dense_nested_printing():
    t = TensorType((2, 2, 3), "i32")
    d = DenseAttr(t, range(12))
    assert str(d) == "dense<[[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]]> : tensor<2x2x3xi32>"
    assert str(DenseAttr(TensorType((), "f64"), (2,))) == "dense<2.0> : tensor<f64>"
    assert str(DenseAttr(TensorType((1,), "f32"), (2,))) == "dense<[2.0]> : tensor<1xf32>"
    assert str(DenseAttr(TensorType((2, 2), "i1"), (1, 0, True, False))) == \
        "dense<[[true, false], [true, false]]> : tensor<2x2xi1>"
    assert str(DenseAttr(TensorType((2, 0), "f32"), ())) == "dense<[[], []]> : tensor<2x0xf32>"
    with pytest.raises(ValueError, match="3 values for 4 elements"):
        DenseAttr(TensorType((4,), "f32"), (1.0, 2.0, 3.0))


@pytest.mark.parametrize("dense", [
    DenseAttr(TensorType((2, 2, 3), "i32"), range(12)),
    DenseAttr(TensorType((4,), "f32"), (1e-05, 1e20, float("inf"), -2.5)),
    DenseAttr(TensorType((2,), "f32"), (0.0, -0.0)),
    DenseAttr(TensorType((3,), "bf16"), (0.5,)),
    DenseAttr(TensorType((), "i64"), (-7,)),
    DenseAttr(TensorType((2,), "i1"), (True, False)),
    DenseAttr(TensorType((2, 0), "f32"), ()),
    DenseAttr(TensorType((0, 2), "f32"), ()),
])
def test_dense_round_trip(dense):
    back = roundtrip_attr(dense)
    assert isinstance(back, DenseAttr) and str(back) == str(dense) and back == dense
