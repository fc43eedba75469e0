"""The flags as data: ``flags.add`` passes argparse only what a flag sets."""

from __future__ import annotations

import argparse

import pytest

from flowforge.cli import flags, parser


def parsed(*given: flags.Flag, argv: tuple[str, ...] = ()) -> argparse.Namespace:
    command = argparse.ArgumentParser()
    flags.add(command, given)
    return command.parse_args(argv)


def test_a_repeatable_flag_collects_its_values_in_a_list_of_its_own_per_parser() -> None:
    first = parsed(flags.TASKS, argv=("--tasks", "a", "--tasks", "b"))
    assert first.tasks == ["a", "b"]
    assert parsed(flags.TASKS).tasks == []
    assert parsed(flags.TASKS).tasks is not parsed(flags.TASKS).tasks


def test_an_option_a_flag_leaves_unset_is_argparses_own_default() -> None:
    assert parsed(flags.JSON).json is False  # store_true's default, not None
    assert parsed(flags.IDEMPOTENCY_KEY).idempotency_key is None


def test_a_flag_bounds_its_number_before_anything_runs() -> None:
    assert parsed(flags.BATCH, argv=("--batch", "10")).batch == 10
    command = argparse.ArgumentParser(exit_on_error=False)
    flags.add(command, [flags.BATCH])
    with pytest.raises(argparse.ArgumentError, match="must be from 1 to"):
        command.parse_args(["--batch", "0"])


def test_the_positionals_a_unicode_error_names_are_the_commands_positional_flags() -> None:
    assert {"workflow", "run", "id", "task", "name"} == parser._POSITIONALS
