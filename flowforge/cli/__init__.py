"""The ``flowforge`` command line: one module per command group.

``main`` builds the parser and maps errors to exit codes; each command's module is
imported only when that command runs, so ``flowforge --help`` stays fast.
"""
