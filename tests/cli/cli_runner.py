"""Run the `interpret` command line in the test's own process, stdout and stderr kept apart."""

from __future__ import annotations

from click.testing import CliRunner, Result

from interpret.cli.main import cli


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    """Return the result of `interpret ARGS` (the group's own error handling included)."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)
