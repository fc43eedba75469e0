"""The pure core: state machines, aggregates, rules and workflow definitions.

Nothing here imports a driver, the network, threads, or the other FlowForge packages;
``tests/unit/aggregates/test_purity.py`` enforces it. The one read of the outside world is
``definition.load_definition(path)`` reading the file its caller names.
"""
