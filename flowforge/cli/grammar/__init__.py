"""The commands as data, one module per family: each :class:`~.command.Command` names its
help, an example, its flags and its handler (``module:function``, imported only when the
command runs). ``flowforge/cli/parser.py`` builds argparse's parser from them.

Standard library and ``flowforge.cli.flags`` only, so that ``flowforge --help`` loads no
engine."""
