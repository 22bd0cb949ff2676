"""The tree's dependency direction (docs/architecture.md): no import cycles, no arrow against the flow.

Imports are read from the source with :mod:`ast` (module level and inside functions alike;
``if TYPE_CHECKING:`` blocks aside), so a lazy import cannot hide a backward arrow.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Each product folder (installed as ``tailscope.<folder>``) and the folders it may import.
#: The order is the data flow, read from the bottom up: a folder imports only folders above it here.
ALLOWED = {
    "support": set(),
    "rundir": {"support"},
    "tracing/kit": {"support"},
    "targets": {"tracing/kit", "support"},
    "tracing/ingest": {"rundir", "support"},
    "signals": {"rundir", "support"},
    "loadgen": {"rundir", "support"},
    # the LLM fault traffic sizes its prompts with loadgen's tokenizer-exact prompt maker (a peer, not a cycle)
    "faults": {"loadgen", "rundir", "support"},
    # the analysis's types: what the analyzers build and the report, compare and the CLI read
    "analysis_model": {"support"},
    "analyzers": {"analysis_model", "rundir", "support"},
    "reports": {"analysis_model", "support"},
    # the synthetic-run generator names the cause each spike should get from the detectors' declarations
    "testkit": {"analysis_model", "analyzers", "rundir", "support"},
    "scenario_model": {"analysis_model", "loadgen", "faults", "analyzers", "rundir", "support"},
    "conductor": {"analysis_model", "scenario_model", "loadgen", "tracing/ingest", "signals", "faults", "analyzers",
                  "reports", "rundir", "support"},
    "lab": {"analysis_model", "conductor", "scenario_model", "faults", "analyzers", "reports", "rundir", "support"},
    "cli": {"analysis_model", "lab", "conductor", "scenario_model", "loadgen", "tracing/ingest", "signals", "faults",
            "analyzers", "reports", "targets", "rundir", "support"},
    "scenarios": {"conductor", "loadgen"},
}


def product_modules() -> dict[str, str]:
    """``tailscope.a.b`` → source path, for every module of every folder in :data:`ALLOWED`."""
    modules = {}
    tops = {folder.split("/")[0] for folder in ALLOWED}
    for top in sorted(tops):
        for here, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(here, name), ROOT)[:-3]
                    dotted = "tailscope." + rel.replace(os.sep, ".")
                    modules[dotted.removesuffix(".__init__")] = os.path.join(here, name)
    return modules


def _type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(module: str, path: str, modules: dict[str, str], type_checking: bool = False) -> set[str]:
    """The product modules ``module`` imports (the longest known prefix of each import);
    with ``type_checking``, also those imported only for type checkers."""
    tree = ast.parse(open(path).read())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        if not names or (not type_checking and _type_checking_only(node, parents)):
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
                break
    return found


def folder_of(module: str) -> str:
    parts = module.split(".")[1:]
    two = "/".join(parts[:2])
    return two if two in ALLOWED else parts[0]


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    modules = product_modules()
    return {module: imports_of(module, path, modules, type_checking) for module, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_circles_even_through_type_checking_imports():
    """A module pair that names each other only for type checkers is still a circle a reader
    must untangle: the config or protocol type belongs in a module both import."""
    cycles = find_cycles(import_graph(type_checking=True))
    assert not cycles, "circles through type-checking imports:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_against_the_flow():
    backward = []
    for module, targets in sorted(import_graph().items()):
        source = folder_of(module)
        for target in sorted(targets):
            dest = folder_of(target)
            if dest != source and dest not in ALLOWED[source]:
                backward.append(f"{module} -> {target}  ({source} may not import {dest})")
    assert not backward, "imports against the data flow:\n" + "\n".join(backward)


def test_the_checker_sees_cycles_and_lazy_imports(tmp_path):
    graph = {"tailscope.a.x": {"tailscope.b.y"}, "tailscope.b.y": {"tailscope.a.x"}, "tailscope.c": set()}
    assert find_cycles(graph) == [["tailscope.a.x", "tailscope.b.y"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from tailscope.reports import writer\n"
                      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tailscope.lab\n")
    modules = {"tailscope.reports.writer": "", "tailscope.reports": "", "tailscope.lab": "", "tailscope.m": ""}
    assert imports_of("tailscope.m", str(source), modules) == {"tailscope.reports.writer"}


def test_every_package_is_installed_and_nothing_shadows_it():
    """Every folder with an ``__init__.py`` is in pyproject's package list, and no root folder is
    named like the installed package (``./tailscope`` would shadow it when run from the clone)."""
    config = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {module for module, path in product_modules().items() if path.endswith("__init__.py")}
    assert on_disk <= listed, f"packages missing from pyproject.toml: {sorted(on_disk - listed)}"
    assert all(config["package-dir"][p] == p.removeprefix("tailscope.").replace(".", "/") for p in listed)
    assert not os.path.exists(os.path.join(ROOT, "tailscope")), "a root folder named tailscope shadows the package"
    assert not os.path.exists(os.path.join(ROOT, "target")), "tools read a root target/ as build output"


def test_each_folder_has_a_declared_place():
    tops = {f.split("/")[0] for f in ALLOWED}
    found = {name for name in os.listdir(ROOT)
             if os.path.isfile(os.path.join(ROOT, name, "__init__.py"))}
    assert found <= tops, f"folders without a place in ALLOWED: {sorted(found - tops)}"
    assert re.fullmatch(r"3\.\d+", f"{sys.version_info.major}.{sys.version_info.minor}")
