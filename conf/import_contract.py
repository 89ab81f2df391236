"""The import contract of storelib, udfs and jobs, checked by ``make lint`` (``python conf/import_contract.py``).

Every import of a project module counts: at module level, under ``if TYPE_CHECKING:`` and inside functions. It fails
on an import cycle among the project's modules, and on an import upward across the layers below (lowest first): a
module imports only modules of its own layer or lower ones. ``--graph`` prints every edge.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storelib", "udfs", "jobs")
#: the layers, lowest first: (module or package prefix, layer); a module takes its longest matching prefix
LAYERS: tuple[tuple[str, int], ...] = (
    # storelib: format facts and broker rules, Spark-free (storelib/__init__.py names the order)
    ("storelib", 0),
    ("storelib.errors", 0),
    ("storelib.constants", 0),
    ("storelib.layout", 1),
    ("storelib.findings", 1),
    ("storelib.formats", 2),
    ("storelib.broker", 3),
    ("storelib.reports", 4),
    ("storelib.audit", 5),
    ("storelib.replay", 5),
    ("storelib.synthetic", 6),
    # what executors run
    ("udfs", 10),
    # the driver: the Spark runtime and the tables; then jobs/pipeline's types (the run's context, the audit's values,
    # tasks, progress, listing the store), its stages, and its verbs (*_flow, each above those it calls)
    ("jobs", 20),
    ("jobs.runtime", 20),
    ("jobs.tables", 21),
    ("jobs.report", 21),
    ("jobs.pipeline", 30),
    *((f"jobs.pipeline.{m}", 30) for m in ("context", "progress", "tasks", "durable", "liveness", "listing")),
    ("jobs.pipeline.audit_types", 31),
    *((f"jobs.pipeline.{m}", 32) for m in ("store_rules", "parse", "consume_queues", "index_files", "output")),
    *((f"jobs.pipeline.{m}", 32) for m in ("dledger_files", "timers", "audit_queues", "audit_log", "audit_index")),
    *((f"jobs.pipeline.{m}", 32) for m in ("audit_result", "backup", "transaction")),
    ("jobs.pipeline.rebuild_flow", 33),
    ("jobs.pipeline.convert_flow", 33),
    ("jobs.pipeline.diff_flow", 34),
    ("jobs.pipeline.replay_source", 34),
    ("jobs.pipeline.replay_flow", 34),
    ("jobs.pipeline.audit_flow", 34),
    ("jobs.pipeline.recover_flow", 35),
    ("jobs.pipeline.salvage_flow", 36),
    # the command line, the verbs' entry points, and the archive maker (python -m jobs.runtime.cds: one rebuild)
    ("jobs.cli", 40),
    *((f"jobs.{verb}", 41) for verb in ("generate", "inspect", "rebuild", "audit", "recover", "convert", "diff")),
    ("jobs.replay", 41),
    ("jobs.runtime.cds", 41),
    ("jobs.demo", 42),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> Iterator[tuple[str, int]]:
    """(project module, line) of every import in ``tree``, wherever it is; ``from a import b`` names a.b when that
    is a module, else a."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, known, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield from _known(full if full in known else base, known, node.lineno)


def _known(name: str, known: set[str], line: int) -> Iterator[tuple[str, int]]:
    """The module itself when it is a project module, else its closest project package (``jobs.x.y`` -> ``jobs.x``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name:
        yield name, line


def graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line}."""
    modules = project_modules()
    known = set(modules)
    edges: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        out = edges.setdefault(name, {})
        for target, line in imported(tree, name, path.name == "__init__.py", known):
            if target != name:
                out.setdefault(target, line)
    return edges


def layer(module: str) -> int:
    matches = [(len(prefix), n) for prefix, n in LAYERS if module == prefix or module.startswith(prefix + ".")]
    if not matches:
        raise SystemExit(f"import contract: {module} is in no layer (conf/import_contract.py LAYERS)")
    return max(matches)[1]


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def problems(edges: dict[str, dict[str, int]]) -> list[str]:
    out = []
    for module, targets in sorted(edges.items()):
        for target, line in sorted(targets.items()):
            if layer(target) > layer(module):
                out.append(f"{module}:{line} imports {target}, a higher layer ({layer(module)} -> {layer(target)})")
    for component in cycles(edges):
        inside = [f"{m} -> {t} (line {n})" for m in component for t, n in sorted(edges[m].items()) if t in component]
        out.append(f"import cycle of {len(component)} modules: " + "; ".join(inside))
    return out


def main(argv: list[str]) -> int:
    edges = graph()
    if "--graph" in argv:
        for module, targets in sorted(edges.items()):
            print(f"{module} ({layer(module)}): {', '.join(sorted(targets))}")
    found = problems(edges)
    for p in found:
        print(f"import contract: {p}", file=sys.stderr)
    if not found:
        print(f"import contract: {len(edges)} modules, no cycle, no upward import")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
