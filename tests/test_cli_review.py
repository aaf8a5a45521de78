"""A first-time user's review of search / evaluate / sweep / comm (cli-review): each test is a
command that answered wrongly or unhelpfully before its fix."""

from __future__ import annotations

from typer.testing import CliRunner

from planner.cli.main import app

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error_line(res, *needles) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.output, res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_unparsable_number_names_the_value_typed():
    # typer's own message said only "Invalid value for '--tp': Input should be a valid integer".
    res = cli("evaluate", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tp", "4.5")
    one_error_line(res, "--tp", "'4.5'", "integer")
    res = cli("search", "--model", "8b", "--gpus", "8", "--gpu", "h100", "--tokens-per-batch=1e6")
    one_error_line(res, "--tokens-per-batch", "'1e6'")
