"""The pure core: state machines, aggregates, rules and workflow definitions.

Nothing here imports a driver, the network, threads, or the other FlowForge packages;
``tests/unit/aggregates/test_purity.py`` enforces it. Reading a definition from a file is
``flowforge.app.definition_files``'s job.
"""
