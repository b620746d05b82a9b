"""The reference docs name everything the product exposes: each name of fp8route.__all__ in
docs/python.md, each subcommand and long option the CLI's --help prints in docs/cli.md, and each
FP8ROUTE_* environment variable the library, the tools or the package read somewhere in docs/ or
README.md. CPU only; no torch, no native module (the package's names are read from its source)."""
import ast
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _mentions(text, name):
    """`name` as a whole identifier or option in `text` (so --m does not match --m-grid)."""
    return re.search(r"(?<![A-Za-z0-9_-])" + re.escape(name) + r"(?![A-Za-z0-9_-])", text) is not None


def public_names():
    """fp8route.__all__ as the package builds it: the list assigned in __init__.py, plus the names
    appended to it (Fp8Linear, when torch is installed)."""
    tree = ast.parse(_read("python", "fp8route", "__init__.py"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names += [e.value for e in node.value.elts]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "__all__"):
            names += [a.value for a in node.args]
    return names


def test_every_public_name_is_in_python_md():
    names = public_names()
    assert {"scaled_mm", "LinearPlan", "Fp8Linear"} <= set(names), names  # the parse found the list
    doc = _read("docs", "python.md")
    missing = [n for n in names if not _mentions(doc, n)]
    assert not missing, f"docs/python.md does not mention fp8route.{missing}"


def _help(cli, path):
    r = subprocess.run([cli, *path, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"fp8route {' '.join(path)} --help: exit {r.returncode}\n{r.stderr}"
    return r.stdout


def cli_surface(cli):
    """{subcommand path: [long options]} of every subcommand --help lists, recursively."""
    surface, todo = {}, [()]
    while todo:
        path = todo.pop()
        text = _help(cli, path)
        section, options = None, []
        for line in text.splitlines():
            if re.match(r"^\S.*:$", line):  # "Options:", "Subcommands:", ...
                section = line[:-1].strip()
                continue
            m = re.match(r"^\s{2}(\S.*?)(\s{2,}|$)", line)
            if not m:
                continue
            if section == "Subcommands":
                todo.append((*path, m.group(1).split()[0]))
            else:  # "-m,--m INT ...", "--table TEXT": the long names of an option line
                options += [o for o in re.findall(r"(?:^|[ ,])(--[a-z0-9][a-z0-9-]*)", m.group(1))]
        surface[path] = sorted(set(options) - {"--help"})
    return surface


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("FP8ROUTE_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("FP8ROUTE_CLI does not name the fp8route binary")
    return path


def test_every_subcommand_and_option_is_in_cli_md(cli):
    surface = cli_surface(cli)
    assert len(surface) > 3 and surface[()], surface  # the help was parsed
    doc = _read("docs", "cli.md")
    missing = [f"fp8route {' '.join(p)}".rstrip() for p in surface if p and not _mentions(doc, p[-1])]
    missing += [f"fp8route {' '.join(p)} {o}".replace("  ", " ") for p, opts in surface.items() for o in opts
                if not _mentions(doc, o)]
    assert not missing, "docs/cli.md does not mention:\n  " + "\n  ".join(missing)


def environment_variables():
    """The FP8ROUTE_* names the code of src/, tools/ and python/fp8route/ reads (string literals)."""
    found = {}
    for top in ("src", "tools", os.path.join("python", "fp8route")):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".cpp", ".cu", ".h", ".cuh", ".py")):
                    continue
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    for name in re.findall(r"[\"'](FP8ROUTE_[A-Z0-9_]+)[\"']", fh.read()):
                        found.setdefault(name, os.path.relpath(p, ROOT))
    return found


def test_every_environment_variable_is_documented():
    found = environment_variables()
    assert {"FP8ROUTE_TABLE", "FP8ROUTE_LOG"} <= set(found), found  # the scan found the readers
    docs = [_read("README.md")] + [_read("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                                   if f.endswith(".md")]
    missing = [f"{n} (read in {where})" for n, where in sorted(found.items())
               if not any(_mentions(d, n) for d in docs)]
    assert not missing, "not in docs/ or README.md: " + ", ".join(missing)
