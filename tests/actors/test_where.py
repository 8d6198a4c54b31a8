"""The --where language (actors/cli/_where.py), on its own: what it takes, what it refuses, its bounds."""

from __future__ import annotations

import pytest

from actorwire.actors.cli._where import Where, WhereError

RECORD = {"rank": 3, "lr": 0.5, "kind": "lr_update", "actor": "echo", "tags": ["a", "b"], "t": 1.25}


@pytest.mark.parametrize(("text", "expected"), [
    ("rank == 3", True),
    ("rank >= 3 and lr > 0", True),
    ("rank > 3 or kind == 'lr_update'", True),
    ("not rank == 3", False),
    ("1 < rank < 4", True),  # chained
    ("-rank == -3", True),
    ("rank * 2 + 1 == 7", True),
    ("rank % 2 == 1", True),
    ("lr / 2 == 0.25", True),
    ("'a' in tags and 'c' not in tags", True),
    ("kind in ['lr_update', 'batch']", True),
    ("'lr' + '_update' == kind", True),
    ("missing == 1", False),  # a field the record lacks: false, not an error
    ("rank == 'three' or rank < 'x'", False),  # a type mismatch: false
    ("rank / 0 == 1", False),
])
def test_an_expression_is_evaluated_against_a_record(text: str, expected: bool) -> None:
    assert Where(text)(RECORD) is expected


@pytest.mark.parametrize(("text", "says"), [
    ("__import__('os').system('id')", "`Call` is not allowed"),
    ("rank.bit_length() > 1", "is not allowed"),
    ("tags[0] == 'a'", "`Subscript` is not allowed"),
    ("(lambda: 1)()", "is not allowed"),
    ("rank ** 2 == 9", "`Pow` is not allowed"),
    ("rank ==", "--where: invalid syntax"),
    ("[x for x in tags]", "is not allowed"),
])
def test_anything_but_fields_constants_and_operators_is_refused_before_reading(text: str, says: str) -> None:
    with pytest.raises(WhereError, match=says.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        Where(text)


@pytest.mark.parametrize("text", ["'a' * 3000000000 == ''", "tags * 1000000 == []", "kind * 200000 == ''"])
def test_a_value_past_the_bound_is_refused_not_built(text: str) -> None:
    with pytest.raises(WhereError, match="--where: the expression builds a value of"):
        Where(text)(RECORD)


def test_values_under_the_bound_are_built() -> None:
    assert Where("'ab' * 3 == 'ababab'")(RECORD)
    assert Where("'x' * 1000 != ''")(RECORD)
