"""The README's tables match the code's own definitions: the XLATuner
arguments (its signature), the TensorBoard tags (the constants of
`tf_backend.summaries`) and the finding codes (`core.findings.CODES`)."""

import ast
import collections
import inspect
import pathlib
import re

import keras_xla
from keras_xla.core import summaries
from keras_xla.core.findings import CODES
from keras_xla.core.summaries import (
    CACHE_TAGS,
    DECISION_TAG,
    FINDINGS_TAG,
    HLO_TAGS,
    SCALAR_TAGS,
    STEP_TIME_TAG,
    VERDICT_TAG,
)

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row; a `|` inside backticks is text."""
    cells, cell, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return [*cells, cell.strip()]


def _rows(first_header: str) -> list[list[str]]:
    """The body rows of every README table whose first header cell is
    `first_header`."""
    rows, table, header = [], None, None
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.lstrip().startswith("|"):
            table = header = None
            continue
        cells = _cells(line)
        if table is None:
            table, header = [], cells[0]
        elif set(cells[0]) <= set("-: "):
            continue  # The separator row.
        elif header == first_header:
            rows.append(cells)
    assert rows, f"README has no table headed {first_header!r}"
    return rows


def _code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _listed_once(names: list[str], table: str) -> set[str]:
    twice = [n for n, k in collections.Counter(names).items() if k > 1]
    assert not twice, f"listed more than once in the {table} table: {twice}"
    return set(names)


def test_the_arguments_table_is_the_tuners_signature():
    parameters = inspect.signature(keras_xla.XLATuner).parameters
    rows = _rows("argument")
    for row in rows:
        assert len(_code_spans(row[0])) == len(_code_spans(row[1])) == 1, row
    names = [_code_spans(row[0])[0] for row in rows]
    assert _listed_once(names, "arguments") == set(parameters)
    for row in rows:
        (name,) = _code_spans(row[0])
        (default,) = _code_spans(row[1])
        value = ast.literal_eval(default)
        expected = parameters[name].default
        # `True == 1`: the type is compared as well as the value.
        assert (type(value), value) == (type(expected), expected), name
        assert row[2], f"{name} has no meaning in the arguments table"


def test_the_finding_codes_table_is_the_code_table():
    rows = _rows("code")
    names = [code for row in rows for code in _code_spans(row[0])]
    listed = _listed_once(names, "finding codes")
    assert sorted(set(CODES) - listed) == [], "codes missing from README"
    assert sorted(listed - set(CODES)) == [], "README names unknown codes"
    assert all(len(row) == 3 and row[1] and row[2] for row in rows)


def test_the_tensorboard_table_lists_every_tag_written():
    named = {
        *SCALAR_TAGS,
        *HLO_TAGS,
        *CACHE_TAGS,
        FINDINGS_TAG,
        DECISION_TAG,
        VERDICT_TAG,
        STEP_TIME_TAG,
    }
    # Tag constants added since (`*_TAG`, `*_TAGS`) belong in the table too.
    defined = set(named)
    for constant, value in vars(summaries).items():
        if constant.endswith("_TAGS"):
            defined.update(value)
        elif constant.endswith("_TAG"):
            defined.add(value)
    rows = _rows("tag")
    names = [tag for row in rows for tag in _code_spans(row[0])]
    listed = _listed_once(names, "TensorBoard tags")
    assert sorted(defined - listed) == [], "tags missing from README"
    assert sorted(listed - defined) == [], "README names unknown tags"


def test_the_table_parser_reads_cells_with_pipes_in_code():
    assert _cells("| `a|b` | c |") == ["`a|b`", "c"]
