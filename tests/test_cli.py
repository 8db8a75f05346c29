"""The command-line interface as a person sees it: help text of every command."""
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from spacy_crossner.cli import app

COMMANDS = sorted(get_command(app).commands)


def test_commands_are_registered():
    assert {"convert", "raw-text", "evaluate", "report", "dapt", "select-corpus"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_flags_without_a_value_type(command):
    res = CliRunner().invoke(app, [command, "--help"])
    assert res.exit_code == 0, res.output
    # a flag takes no value: typer's rich help printed "--help <bool>", "--no-progress <bool>"
    assert "<bool>" not in res.output
    help_lines = [line for line in res.output.splitlines() if line.strip().startswith("--help")]
    assert help_lines and help_lines[0].split()[1:] == ["Show", "this", "message", "and", "exit."]


def test_convert_help_lists_its_options():
    res = CliRunner().invoke(app, ["convert", "--help"])
    assert "--progress / --no-progress" in res.output and "--by-document" in res.output
    assert "[default: auto]" in res.output
