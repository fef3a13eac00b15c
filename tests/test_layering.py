"""Layering, one way: frontend -> ir -> backends. An AST walk of every module of the dt package
finds each import, at module level or inside a function or class, and checks it against the
rules below; the checker itself is tested on modules written to break each rule."""
import ast
from pathlib import Path

import pytest

DT = Path(__file__).resolve().parents[1] / "dt"

# (the package whose modules are checked, the packages they must not import, why)
RULES = [
    ("dt.backends", ("dt.debug", "dt.frontend"),
     "a backend consumes the scheduled IR only; dt.debug instruments the interpreter from outside"),
    ("dt.ir", ("dt.backends", "dt.debug", "dt.frontend"), "the IR knows neither its producers nor its consumers"),
    ("dt.frontend", ("dt.backends",), "the frontend produces the algorithm IR and runs no backend itself"),
    ("dt", ("conformance",), "the conformance suite is dt.conformance, not a top-level package"),
]
RULE_IDS = [rule[0] for rule in RULES]


def dt_modules() -> list[tuple[str, bool, str]]:
    """(module name, whether it is a package's __init__, source) of every module of the dt
    package. Only directories with an __init__.py are dt's: the example backend under
    dt/conformance is a distribution of its own."""
    modules = []
    for path in sorted(DT.rglob("*.py")):
        parts = path.relative_to(DT.parent).with_suffix("").parts
        if not all((DT.parent.joinpath(*parts[:i]) / "__init__.py").exists() for i in range(1, len(parts))):
            continue
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules.append((name, is_package, path.read_text(encoding="utf-8")))
    return modules


def imports(module: str, is_package: bool, source: str) -> list[tuple[str, int]]:
    """(module name, line) for every import anywhere in `source`, relative ones resolved; for
    `from X import y`, both X and X.y (y may be a submodule: `from dt import debug`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*"]
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(rule, modules) -> list[str]:
    """One line per import statement that breaks `rule`, naming the first forbidden module it imports."""
    package, forbidden, _ = rule
    found = {}
    for module, is_package, source in modules:
        if within(module, package):
            for name, line in imports(module, is_package, source):
                if any(within(name, f) for f in forbidden):
                    found.setdefault((module, line), f"{module}:{line} imports {name}")
    return list(found.values())


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_dt_keeps_the_rule(rule):
    modules = dt_modules()
    assert any(within(name, rule[0]) for name, _, _ in modules), f"no module of {rule[0]} found"
    found = violations(rule, modules)
    assert not found, f"{rule[2]}:\n" + "\n".join(found)


def test_the_walk_covers_dt_and_only_dt():
    names = {name for name, _, _ in dt_modules()}
    assert {"dt", "dt.runtime", "dt.backends.numpy", "dt.debug.instrument", "dt.conformance.runner"} <= names
    assert not any("example_backend" in name for name in names)


# A module of each checked package that breaks its rule in each way an import can be written.
BREAKING = {
    "dt.backends": [("dt.backends.numpy.codegen", False, "from dt.debug import config\n"),
                    ("dt.backends.numpy", True, "def run():\n    from dt import debug\n"),
                    ("dt.backends.pysource", False, "import dt.frontend.parser\n"),
                    ("dt.backends.triton.kernel", False, "class K:\n    def f(self):\n"
                                                         "        from ...frontend import api\n")],
    "dt.ir": [("dt.ir.lower", False, "from dt.backends.numpy.runtime import DTYPES\n"),
              ("dt.ir.check", False, "def f():\n    import dt.debug\n"),
              ("dt.ir.scheduled", False, "from ..frontend.parser import parse\n"),
              ("dt.ir", True, "from dt import backends\n")],
    "dt.frontend": [("dt.frontend.api", False, "def program():\n    from dt.backends import get\n"),
                    ("dt.frontend.parser", False, "from .. import backends\n")],
    "dt": [("dt.cli", False, "def cmd_conformance(args):\n    from conformance.runner import run_command\n"),
           ("dt.testing", False, "import conformance\n"),
           ("dt.debug.trace", False, "from conformance import catalogue\n")],
}


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_each_way_of_breaking_the_rule_is_caught(rule):
    for module, is_package, source in BREAKING[rule[0]]:
        assert len(violations(rule, [(module, is_package, source)])) == 1, (module, source)


def test_allowed_imports_pass():
    allowed = [("dt.backends.numpy", True, "from dt.backends.numpy.codegen import render\nfrom dt.ir import S\n"),
               ("dt.debug.instrument", False, "from dt.backends import numpy\n"),
               ("dt.ir.lower", False, "from dt.dtypes import NAMES\nfrom .scheduled import Pipeline\n"),
               ("dt.conformance.runner", False, "from . import vendor\nfrom dt.conformance.case import Case\n"),
               ("dt.frontend.parser", False, "from dt.frontend import api\nimport dt.runtime\n")]
    assert [v for rule in RULES for v in violations(rule, allowed)] == []


LONG = 500  # lines a module may have without saying why
LONGEST = 600


@pytest.mark.parametrize("name, source", [pytest.param(name, source, id=name) for name, _, source in dt_modules()])
def test_a_module_reads_in_one_sitting(name, source):
    lines = source.count("\n")
    assert lines <= LONGEST, f"{name} has {lines} lines; split it along its parts"
    if lines > LONG:
        assert f"Longer than {LONG} lines:" in (ast.get_docstring(ast.parse(source)) or ""), \
            f"{name} has {lines} lines: say why at its top ('Longer than {LONG} lines: ...'), or split it"
