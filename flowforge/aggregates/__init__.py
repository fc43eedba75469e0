"""The pure core: state machines, aggregates, rules and workflow definitions.

Nothing here does I/O or imports a driver, the network, threads, or the other FlowForge
packages; ``tests/unit/aggregates/test_purity.py`` enforces it.
"""
