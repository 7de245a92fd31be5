"""get_many's decoding loop in the core (``_redoxide.decode_many``): which function reads which
value, and when it leaves everything to the general path (None) so that path can name the key."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from redoxide import _redoxide

HEADS = b"\x80"


def loads(data: bytes) -> Any:
    return ("loads", pickle.loads(data))


def decode(data: bytes, key: Any) -> Any:
    return ("decode", key, data)


def test_each_value_goes_to_loads_or_decode_by_its_first_byte() -> None:
    keys = ["a", "b", "c", 4]
    values = [pickle.dumps("x"), None, b"42", b""]
    assert _redoxide.decode_many(keys, values, loads, HEADS, decode) == {
        "a": ("loads", "x"),
        "c": ("decode", "c", b"42"),
        4: ("decode", 4, b""),
    }


def test_no_heads_sends_every_value_to_decode() -> None:
    got = _redoxide.decode_many(["a"], [pickle.dumps(1)], loads, b"", decode)
    assert got == {"a": ("decode", "a", pickle.dumps(1))}


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        (["a", "b"], [pickle.dumps(1)]),  # lengths differ
        (("a",), (pickle.dumps(1),)),  # not lists
        (["a"], [bytearray(pickle.dumps(1))]),  # not bytes
        (["a"], [1]),
    ],
)
def test_anything_unexpected_is_left_to_the_general_path(keys: Any, values: Any) -> None:
    assert _redoxide.decode_many(keys, values, loads, HEADS, decode) is None


def test_an_exception_while_decoding_is_left_to_the_general_path() -> None:
    def failing(data: bytes, key: Any = None) -> Any:
        raise ValueError("corrupt")

    values = [pickle.dumps(1), b"raw"]
    assert _redoxide.decode_many(["a", "b"], values, failing, HEADS, decode) is None
    assert _redoxide.decode_many(["a", "b"], values, loads, HEADS, failing) is None


def test_an_interrupt_while_decoding_goes_on_up() -> None:
    def interrupted(data: bytes) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _redoxide.decode_many(["a"], [pickle.dumps(1)], interrupted, HEADS, decode)
