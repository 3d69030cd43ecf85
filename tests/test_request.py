"""The request's parts (`interpret.request`): torch-free, each refuses a bad field in one line when made, the
command line turns that line into its usage error (exit 2), and `explain` / `run_audit` take them in at most
12 and 10 parameters."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from interpret.errors import ConfigError, InputError
from interpret.request import AuditOptions, EvidenceOptions, Limits, Subject


def test_the_parts_import_without_torch() -> None:
    code = "import sys, interpret.request, interpret.cli.options; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: EvidenceOptions(removal="drop"), ConfigError, "removal='drop' is not one of delete, mask, zero"),
    (lambda: Limits(streaming="sometimes"), ConfigError, "streaming='sometimes' is unknown; use auto, on or off"),
    (lambda: Subject(target="cat", generate=2), InputError, "drop target, or drop generate"),
    (lambda: Subject(continuation=["x"], generate=2), InputError, "drop continuation, or drop generate"),
    (lambda: AuditOptions(target="label"), ConfigError, "the audit explains 'prediction' or 'gold'"),
    (lambda: AuditOptions(streaming="auto"), ConfigError, "use 'on' (streamed computations) or 'off'"),
    (lambda: AuditOptions(part_examples=0), ConfigError, "part_examples=0 must be a positive number"),
    (lambda: AuditOptions(drivers=True), ConfigError, "drivers=True must be a number of tokens"),
    (lambda: AuditOptions(slice_by="lang"), ConfigError, "pass input_file= too"),
])
def test_each_part_refuses_a_bad_field_in_one_line_when_made(make, error, message) -> None:
    with pytest.raises(error) as caught:
        make()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_refuses_what_a_part_refuses_as_a_usage_error() -> None:
    import click

    from interpret.cli.options import built, request_parts

    with pytest.raises(click.UsageError) as caught:
        built(AuditOptions, streaming="auto")
    assert caught.value.exit_code == 2 and "use 'on' (streamed computations) or 'off'" in caught.value.message
    limits, evidence = request_parts(16, "on", False, "mask")
    assert (limits.max_length, limits.streaming, evidence.enabled, evidence.removal) == (16, "on", False, "mask")


def test_explain_and_run_audit_take_few_parameters() -> None:
    from interpret.api import explain
    from interpret.audit import run_audit

    assert len(inspect.signature(explain).parameters) <= 12
    assert len(inspect.signature(run_audit).parameters) <= 10
