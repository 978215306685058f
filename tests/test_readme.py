import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs():
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("## From Python") :], re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().strip()


def test_readme_test_command_is_what_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python3 -m pytest -q" in ci
    assert "python -m pytest -q" in README.read_text()
