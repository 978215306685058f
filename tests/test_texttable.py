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


def _table_after(out: str, head: str) -> list[str]:
    """The header line starting with ``head`` and the rows under its rule, up to the first line that is not a row."""
    lines = out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.lstrip().startswith(head))
    rows = []
    for line in lines[i + 2 :]:
        if not line.strip() or line.startswith(("(", "a region")):
            break
        rows.append(line)
    assert set(lines[i + 1]) == {"-"}, "a rule under the header"
    return [lines[i], *rows]


def test_sum_orders_and_reveal_sweep_tables_align(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """The two tables that were hand-padded (sum --orders' results, reveal --sweep's regions) go through the
    one formatter: a wide cell (a hex, a range of n, a long verdict) widens its column, every column aligned."""
    from fpreduce.analysis import reveal

    assert main(["sum", "1e8,1,-1e8,0.5,3,-2.25", "--input", "bf16", "--accumulate", "bf16", "--orders", "60"]) == 0
    rows = _table_after(capsys.readouterr().out, "result")
    assert len(rows) > 3
    assert _aligned(*rows)
    found = [
        reveal.Region(1, 15, "tree", "fp64", "sequential", 15, 400),
        reveal.Region(1024, 1048576, "no fixed tree", "fp64", "", 1, 9),
    ]
    monkeypatch.setattr(reveal, "hazard_map", lambda *a, **k: found)  # the table, not the probes
    assert main(["reveal", "numpy.dot", "--format", "fp64", "--sweep", "1:1048576", "-q"]) == 0
    rows = _table_after(capsys.readouterr().out, "n ")
    assert [r.split("  ")[0].strip() for r in rows] == [
        "n",
        "1..15",
        "1024..1048576",
    ]  # (wider than the 12 columns once padded to)
    assert "no fixed tree" in rows[2]
    assert _aligned(*rows)
