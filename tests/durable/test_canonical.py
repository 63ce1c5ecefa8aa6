from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentflow.durable import DurableError, canonical_json, es6_number, parse_json
from agentflow.durable.wire.canonical_walk import canonical_by_walk

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: The reference implementation (the benchmark and dev extras install it).
RFC8785_DUMPS: Callable[[Any], bytes] | None
try:
    import rfc8785
except ImportError:
    RFC8785_DUMPS = None
else:
    RFC8785_DUMPS = rfc8785.dumps

# ECMAScript Number.prototype.toString for each float (worked out by hand from the spec).
ES6 = [
    (0.0, "0"),
    (-0.0, "0"),
    (1.0, "1"),
    (-7.0, "-7"),
    (0.5, "0.5"),
    (1e21, "1e+21"),
    (1e20, "100000000000000000000"),
    (2.0**60, "1152921504606847000"),
    (2.0**53, "9007199254740992"),
    (1e-6, "0.000001"),
    (1e-7, "1e-7"),
    (1.5e-5, "0.000015"),
    (1.23e-18, "1.23e-18"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (0.1 + 0.2, "0.30000000000000004"),
    (123456.789, "123456.789"),
    (-4.5e-4, "-0.00045"),
]


@pytest.mark.parametrize(("value", "text"), ES6)
def test_numbers_are_spelled_as_ecmascript(value: float, text: str) -> None:
    assert es6_number(value) == text
    assert canonical_json(value) == text.encode()
    assert canonical_json([value, {"n": value}]) == f'[{text},{{"n":{text}}}]'.encode()


def test_members_sort_by_utf16_code_units() -> None:
    # U+E000 sorts after the surrogate pair of U+1F600 in UTF-16, before it by code point.
    doc = {"\ue000": 1, "\U0001f600": 2, "b": 3, "a": {"z": 0, "y": [1]}, "": None}
    assert canonical_json(doc) == (
        '{"":null,"a":{"y":[1],"z":0},"b":3,"\U0001f600":2,"\ue000":1}'.encode()
    )


def test_strings_escape_only_what_rfc8785_escapes() -> None:
    text = 'q"b\\n\n\r\t\b\f\x00\x1f\x7f\u2028é😀/'
    assert canonical_json(text) == (
        b'"q\\"b\\\\n\\n\\r\\t\\b\\f\\u0000\\u001f\x7f\xe2\x80\xa8\xc3\xa9\xf0\x9f\x98\x80/"'
    )


def test_tuples_subclasses_and_literals() -> None:
    class Size(enum.IntEnum):
        BIG = 3

    class Colour(enum.StrEnum):
        RED = "red"

    value = {"t": (1, 2), "e": Size.BIG, "c": Colour.RED, "b": [True, False, None]}
    assert canonical_json(value) == b'{"b":[true,false,null],"c":"red","e":3,"t":[1,2]}'


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (float("nan"), "checkpoint_definition_not_i_json"),
        ({"x": [math.inf]}, "checkpoint_definition_not_i_json"),
        (2**53, "checkpoint_definition_not_i_json"),
        (-(2**53), "checkpoint_definition_not_i_json"),
        ("lone \ud800", "checkpoint_canonicalization_invalid"),
        ({"\udc00": 1}, "checkpoint_canonicalization_invalid"),
        ({1: "x"}, "checkpoint_canonicalization_invalid"),
        ({"s": {1, 2}}, "checkpoint_canonicalization_invalid"),
        (b"bytes", "checkpoint_canonicalization_invalid"),
    ],
)
def test_non_i_json_is_refused(value: object, code: str) -> None:
    with pytest.raises(DurableError) as caught:
        canonical_json(value)
    assert caught.value.code == code


def test_the_integer_limits_are_inclusive() -> None:
    assert canonical_json([2**53 - 1, -(2**53 - 1)]) == b"[9007199254740991,-9007199254740991]"


def test_nesting_deeper_than_orjson_allows_still_encodes() -> None:
    deep: object = 1.5
    for _ in range(400):
        deep = [deep]
    assert canonical_json(deep) == b"[" * 400 + b"1.5" + b"]" * 400


def test_both_paths_agree_on_hard_documents() -> None:
    class Key(str):
        pass

    doc = {"\ue000": [1e-6, 2.0**70, -0.0], "\U0001f600": {"t": (1e16, 5e-7)}, "a": None}
    fast = canonical_json(doc)
    assert fast == canonical_by_walk(doc, "doc")
    assert canonical_json({Key(k): v for k, v in doc.items()}) == fast
    assert fast.startswith('{"a":null,"\U0001f600":{"t":[10000000000000000,5e-7]}'.encode())


def test_cycles_are_refused() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(DurableError) as caught:
        canonical_json(cyclic)
    assert caught.value.code == "checkpoint_canonicalization_invalid"


def test_parse_json_is_strict() -> None:
    assert parse_json(b'{"a":[1,2.5,"\\ud83d\\ude00"]}') == {"a": [1, 2.5, "😀"]}
    big = parse_json("100000000000000000000")
    assert isinstance(big, float) and canonical_json(big) == b"100000000000000000000"
    assert parse_json("18446744073709551615") == 2**64 - 1
    for bad in (b'{"a":1,"a":2}', b"NaN", b"[Infinity]", b'"\\ud800"', b"\xff", b"{", "\udc00"):
        with pytest.raises(DurableError) as caught:
            parse_json(bad)
        assert caught.value.code == "checkpoint_json_invalid"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_bytes_equal_the_rfc8785_package(value: object) -> None:
    if RFC8785_DUMPS is None:
        if IN_CI:
            pytest.fail("rfc8785 must be installed (dev extra) for the byte-identity check")
        pytest.skip("rfc8785 is not installed")
    assert canonical_json(value) == RFC8785_DUMPS(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_fast_path_and_the_walk_agree(value: object) -> None:
    assert canonical_json(value) == canonical_by_walk(value, "value")


# Names built to sort differently by code point and by UTF-16 (U+E000..U+FFFF
# against characters beyond U+FFFF), with shared prefixes, NULs and U+D7FF beside
# them: the fast path's two order tests must never miss one.
hard_names = st.text(
    alphabet=st.sampled_from(
        ["a", "\x00", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"]
    ),
    max_size=4,
)
hard_objects = st.recursive(
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.dictionaries(hard_names, children, min_size=2, max_size=6)
        | st.lists(children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(hard_objects)
def test_member_order_on_names_built_to_differ(value: object) -> None:
    assert canonical_json(value) == canonical_by_walk(value, "value")
    if RFC8785_DUMPS is not None:
        assert canonical_json(value) == RFC8785_DUMPS(value)


# The floats the fast path respells from orjson's digits: integral from 2**53 to
# 1e21 and 1e-6 <= |x| < 1e-5 (with their neighbours on each side).
respelled_floats = st.builds(
    lambda negative, magnitude: -magnitude if negative else magnitude,
    st.booleans(),
    st.integers(min_value=2**53 - 2, max_value=10**21 + 2**20).map(float)
    | st.floats(min_value=9e-7, max_value=1.1e-5)
    | st.floats(min_value=9e15, max_value=1.1e21),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(respelled_floats, min_size=1, max_size=4))
def test_respelled_floats_match_ecmascript(numbers: list[float]) -> None:
    expected = "[" + ",".join(es6_number(number) for number in numbers) + "]"
    assert canonical_json(numbers) == expected.encode()
    if RFC8785_DUMPS is not None:
        assert canonical_json(numbers) == RFC8785_DUMPS(numbers)
