"""interpret.decision.labels: one rule reads every label (a class name, else a whole number that is a class index), over
a whole file; what cannot be resolved is refused naming the line."""

from __future__ import annotations

import pytest

from interpret.decision.labels import resolve_class, resolve_labels
from interpret.errors import InputError

SENTIMENT = ("negative", "positive")


def _where(i: int) -> str:
    return f"data.csv line {i + 2}"


def test_names_indices_and_numbers_name_the_same_class() -> None:
    # A JSON number reaches the rule as its decimal text (interpret.reading.datasets), so 0 and "0" are one label.
    labels = ["0", "negative", "1", "positive", None, "0"]
    assert resolve_labels(labels, SENTIMENT, _where) == [0, 0, 1, 1, None, 0]
    assert resolve_class(1, SENTIMENT) == 1 and resolve_class("positive", SENTIMENT) == 1


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("neutral", "data.csv line 3: 'neutral' is neither a class name nor a class index of this model; its classes"
                    " are 0 'negative', 1 'positive'."),
        ("Negative", "is neither a class name nor a class index"),  # names are exact: case counts ...
        (" negative", "is neither a class name nor a class index"),  # ... and so do spaces
        (" 1", "is neither a class name nor a class index"),  # an index is digits only
        ("1.0", "is neither a class name nor a class index"),
        ("2", "data.csv line 3: class 2 does not exist; this model has classes 0 'negative', 1 'positive'."),
        ("-1", "class -1 does not exist"),
        ("١", "is neither a class name nor a class index"),  # Arabic-Indic digit one: not an ASCII index
    ],
)
def test_a_label_naming_no_class_is_refused_naming_its_line(label: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        resolve_labels(["positive", label, "negative"], SENTIMENT, _where)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_digit_class_names_read_as_names_unless_the_file_also_gives_indices() -> None:
    stars = ("1", "2", "3", "4", "5")  # names that are digits, each another class's index
    assert resolve_labels(["1", "5", "3"], stars, _where) == [0, 4, 2]  # names: nothing reads as an index
    with pytest.raises(InputError) as caught:
        resolve_labels(["1", "5", "0", "3"], stars, _where)  # "0" names no class, so it can only be an index
    message = str(caught.value)
    assert message.startswith("data.csv line 2: the label '1' is the name of class 0 and the index of class 1,")
    assert "data.csv line 4 gives '0', which can only be an index" in message and "write every label as a class name" in message
    # Names equal to their own index are never ambiguous, whichever way a label is read.
    assert resolve_labels(["0", "1", "0"], ("0", "1"), _where) == [0, 1, 0]


def test_stance_names_with_a_minus_are_names() -> None:
    stance = ("-1", "0", "1")
    assert resolve_labels(["-1", "0", "1"], stance, _where) == [0, 1, 2]
    with pytest.raises(InputError, match="line 5 gives '2', which can only be an index"):
        resolve_labels(["-1", "0", "1", "2"], stance, _where)


def test_a_name_two_classes_share_is_refused() -> None:
    with pytest.raises(InputError, match="data.csv line 2: 'x' names classes 0 and 1 of this model; give the class index"):
        resolve_labels(["x"], ("x", "x"), _where)
    assert resolve_labels(["1"], ("x", "x"), _where) == [1]
