"""``flowforge --help`` stays fast: parsing the command line imports the standard library
and FlowForge's light modules only; the engine (the service, the processes, the
composition root) and every third-party package load when a command runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: FlowForge's packages that parsing never needs: each pulls in the engine.
ENGINE = ("flowforge.app", "flowforge.bootstrap", "flowforge.processes", "flowforge.ui")


def loaded_by(code: str) -> list[str]:
    """The top-level modules outside the standard library, and FlowForge's engine
    modules, that ``code`` loads in a fresh interpreter."""
    probe = textwrap.dedent(f"""
        import json, sys
        before = set(sys.modules)
        {code}
        new = set(sys.modules) - before
        print(json.dumps(sorted(new)))
    """)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    modules: list[str] = json.loads(result.stdout)
    outside = {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"flowforge"}
    engine = [m for m in modules if m.startswith(ENGINE)]
    return sorted(outside) + engine


def test_building_the_parser_and_every_help_loads_no_engine_and_no_third_party_module() -> None:
    code = textwrap.dedent("""
        import argparse
        from flowforge.cli import main, parser
        def walk(p):
            p.format_help()
            for a in p._actions:
                if isinstance(a, argparse._SubParsersAction):
                    for sub in a.choices.values():
                        walk(sub)
        walk(parser.build())
    """).replace("\n", "\n        ")
    assert loaded_by(code) == []


def test_the_probe_sees_an_engine_import() -> None:
    assert "flowforge.bootstrap" in loaded_by("import flowforge.bootstrap")
    assert "pydantic" in loaded_by("import pydantic")
