"""The package's house rules, read from its source: no modules that import each other in a circle
(type-only and function-local imports count: a circle is a circle to the reader), and every
import going down the layers ``catwalk_steps/__init__.py`` states, never across a layer."""

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

import catwalk_steps

PACKAGE = Path(catwalk_steps.__file__).parent


def module_name(path: Path) -> str:
    parts = ["catwalk_steps", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports() -> Dict[str, Set[str]]:
    """{module: the package's modules it imports}, anywhere in it (the graph of ``from x import
    y`` counts ``x.y`` where that is a module, else ``x``)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
                imported.update(submodules or {base})
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def stated_layers() -> Dict[str, int]:
    """{folder or top-level module: its layer, 0 the top}, from the ``::`` block of
    ``catwalk_steps/__init__.py``'s docstring."""
    block = catwalk_steps.__doc__.split("::\n", 1)[1].strip("\n").split("\n\n")[0]
    layers: Dict[str, int] = {}
    for depth, line in enumerate(block.splitlines()):
        names = re.split(r"\s{2,}", line.strip())[0]
        layers.update({name.strip(): depth for name in names.split(",")})
    return layers


def part(module: str) -> str:
    """The folder (or top-level module) of ``catwalk_steps.<part>...``."""
    return module.split(".")[1]


def test_no_module_imports_itself_through_others():
    assert circles(package_imports()) == []


def test_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_every_import_goes_down_the_stated_layers():
    layers = stated_layers()
    graph = package_imports()
    parts = {part(module) for module in graph if module != "catwalk_steps"}
    assert parts <= layers.keys(), f"not in the layers of catwalk_steps/__init__.py: {sorted(parts - layers.keys())}"
    wrong = [
        f"{module} -> {imported}"
        for module, imports in sorted(graph.items()) if module != "catwalk_steps"
        for imported in sorted(imports) if imported != "catwalk_steps"
        and part(imported) != part(module) and layers[part(imported)] <= layers[part(module)]
    ]
    assert wrong == []


def test_the_layers_are_read():
    layers = stated_layers()
    assert layers["steps"] < layers["training"] == layers["prediction"] < layers["storage"] < layers["tango_fixes"]
