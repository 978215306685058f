"""The one table formatter of the command line (fpreduce.base.texttable) and the tables that use it."""

import pytest

from fpreduce.base.texttable import table, width
from fpreduce.cli import main


def _spans(line: str) -> list[tuple[int, int]]:
    """Each cell's (start, end) in display columns; cells are separated by two or more spaces."""
    out: list[tuple[int, int]] = []
    col, gap, start = 0, 2, 0
    for ch in line:
        if ch != " ":
            if gap >= 2:
                start = col
                out.append((start, start))
            out[-1] = (out[-1][0], col + width(ch))
        gap = gap + 1 if ch == " " else 0
        col += width(ch)
    return out


def _aligned(*lines: str) -> bool:
    """Every column is aligned: its cells start in one column (left) or end in one column (right)."""
    spans = [_spans(line) for line in lines]
    if len({len(s) for s in spans}) != 1:
        return False
    return all(len({s[j][0] for s in spans}) == 1 or len({s[j][1] for s in spans}) == 1 for j in range(len(spans[0])))


def test_alignment_left_and_right() -> None:
    t = table(["name", "n"], [["a", 1], ["bbbb", 1234]], align="lr").splitlines()
    assert t == ["name     n", "----------", "a        1", "bbbb  1234"]


def test_a_wide_cell_widens_its_column_only() -> None:
    t = table(["plan", "ulp", "x"], [["(((0,1),(2,3)),(4,5))", 0.5, "y"], ["sequential", 12, "z"]])
    lines = t.splitlines()
    assert _aligned(lines[0], lines[2], lines[3])
    assert len(lines[1]) == max(len(line) for line in lines)


@pytest.mark.parametrize("cell", ["ärm", "数値和", "e\u0301te", "∑ ulp"])
def test_non_ascii_cells_align_by_display_width(cell: str) -> None:
    lines = table(["k", "v"], [[cell, 1], ["plain", 22]], align="lr").splitlines()
    ends = {sum(width(c) for c in line) for line in (lines[0], lines[2], lines[3])}
    assert len(ends) == 1  # every row ends in the same column
    assert width("数") == 2
    assert width("e\u0301") == 1


def test_no_header_and_bad_align() -> None:
    assert table(None, [["a", "b"]], align="ll") == "a  b"
    with pytest.raises(ValueError, match="align"):
        table(None, [["a"]], align="c")


def test_sum_aligns_an_explicit_tree(capsys: pytest.CaptureFixture[str]) -> None:
    """`fpreduce sum 1,2,3,4,5,6 --plans '(((0,1),(2,3)),(4,5))',sequential`: the value columns line up."""
    assert main(["sum", "1,2,3,4,5,6", "--plans", "(((0,1),(2,3)),(4,5)),sequential"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert lines[2].startswith("(((0,1),(2,3)),(4,5))  ")
    assert lines[3].startswith("sequential  ")
    assert _aligned(lines[0], lines[2], lines[3])
