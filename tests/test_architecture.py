"""The structure docs/ARCHITECTURE.md describes: imports point down the layers, no module imports
itself back through a circle, and the doc's module map names every module there is."""

import ast
import re

import networkx as nx

from runs import REPO

# Lower layers first; a package may import only packages of lower rank.
LAYERS = {"pastset": 0, "paths": 1, "eventspace": 2, "apps": 3, "monitors": 4, "experiments": 5}
DOC = (REPO / "docs" / "ARCHITECTURE.md").read_text()


def modules() -> dict[str, object]:
    """Dotted module name -> file, for every module of the project's packages."""
    found = {}
    for package in LAYERS:
        for file in (REPO / package).rglob("*.py"):
            parts = list(file.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


def imports() -> list[tuple[str, str]]:
    """(importer, imported) for every import of a project module by another, wherever it is
    written (module level, a function, an `if TYPE_CHECKING:` block): `from pkg import name`
    imports `pkg.name` when that is a module, else `pkg` itself."""
    found = modules()
    packages = {m for m, f in found.items() if f.name == "__init__.py"}
    edges = []
    for module, file in found.items():
        for node in ast.walk(ast.parse(file.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if module in packages else module.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in found else base
                           for alias in node.names]
            edges += [(module, target) for target in targets if target in found and target != module]
    return edges


def test_imports_point_down_the_layers():
    upward = [(a, b) for a, b in imports() if LAYERS[b.split(".")[0]] > LAYERS[a.split(".")[0]]]
    assert upward == []


def floors() -> dict[str, int]:
    """eventspace's module -> its floor, as the package's docstring lists them (`N. what: `a`, `b``;
    `mpi` stands for every module of the subpackage)."""
    doc = ast.get_docstring(ast.parse((REPO / "eventspace" / "__init__.py").read_text())) or ""
    listed = {}
    for floor, names in re.findall(r"^(\d+)\. [^:\n]*: (.*)$", doc, re.M):
        for name in re.findall(r"`([\w.]+)`", names.split(" (")[0]):
            listed[f"eventspace.{name}"] = int(floor)
    found = {}
    for module in modules():
        if module.startswith("eventspace."):
            home = next((m for m in listed if module == m or module.startswith(m + ".")), None)
            found[module] = listed.get(home)
    return found


def test_every_eventspace_module_has_a_floor():
    unplaced = sorted(m for m, floor in floors().items() if floor is None)
    assert unplaced == [], "modules on no floor of eventspace/__init__.py's docstring"


def test_imports_inside_eventspace_point_down_the_floors():
    floor = floors()
    upward = [f"{a} (floor {floor[a]}) imports {b} (floor {floor[b]})" for a, b in imports()
              if a in floor and b in floor and None not in (floor[a], floor[b]) and floor[b] > floor[a]]
    assert upward == []


def test_no_module_imports_itself_back():
    cycles = list(nx.simple_cycles(nx.DiGraph(imports())))
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def classes() -> dict[str, list[str]]:
    """Class name -> the modules that define a class of that name."""
    defined: dict[str, list[str]] = {}
    for module, file in modules().items():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(module)
    return defined


def test_no_two_classes_share_a_name():
    """A reader knows the class from its name, wherever it is met (STYLE.md: one name, one thing)."""
    shared = {name: where for name, where in classes().items() if len(where) > 1}
    assert shared == {}, "classes of one name in several modules"


def test_a_class_is_imported_under_its_own_name():
    """`from m import A as B` of a project class gives it a second name."""
    defined = classes()
    renamed = []
    for module, file in modules().items():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in LAYERS):
                renamed += [f"{module}: {a.name} as {a.asname}" for a in node.names
                            if a.asname and a.asname != a.name and a.name in defined]
    assert renamed == []


def test_no_module_imports_its_own_package():
    """A package's __init__ re-exports its modules; a module that imported it would go round."""
    inward = [(a, b) for a, b in imports() if a.startswith(b + ".") and modules()[b].name == "__init__.py"]
    assert inward == []


def test_the_module_map_names_every_module_and_only_modules_that_exist():
    named = set(re.findall(r"`((?:%s)/[\w/]+\.py)`" % "|".join(LAYERS), DOC))
    files = {str(f.relative_to(REPO)) for f in modules().values() if f.name != "__init__.py"}
    assert sorted(named - files) == [], "the map names modules that do not exist"
    assert sorted(files - named) == [], "modules missing from the map in docs/ARCHITECTURE.md"


def test_the_readme_links_the_architecture():
    assert "(docs/ARCHITECTURE.md)" in (REPO / "README.md").read_text()
