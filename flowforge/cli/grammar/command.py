"""What a command is, as data: :class:`Command`, and :class:`Group` for a command of
actions (``flowforge db init``)."""

from __future__ import annotations

from dataclasses import dataclass

from flowforge.cli.flags import Flag


@dataclass(frozen=True, slots=True)
class Command:
    """One command: its help, an example, the handler it runs and the flags it takes."""

    name: str
    summary: str
    example: str
    #: ``module:function``, imported only when the command runs.
    handler: str
    flags: tuple[Flag, ...] = ()
    #: The --help text (default: the summary).
    description: str = ""
    log_level: str = "WARNING"
    #: False hides --broker-url from its help (it is still accepted).
    uses_broker: bool = True


@dataclass(frozen=True, slots=True)
class Group:
    """A command of actions: its help lists each action's example."""

    name: str
    summary: str
    description: str
    actions: tuple[Command, ...]
