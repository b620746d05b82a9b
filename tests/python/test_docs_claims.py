"""The facts README.md and docs/*.md state about the code hold: the backend lists they quote equal
the backends of the build, the CLI defaults in docs/cli.md equal the ones `--help` prints, the
signatures in docs/python.md equal the package's, every test, file and link they cite exists, and
what they say of the shipped routing table (its entries, which backends it routes to, at which M)
is what routes/h200.json holds. CPU only; the CLI checks run where FP8ROUTE_CLI names the binary."""
import ast
import collections
import glob
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _prose(text):
    """The text without fenced code blocks (examples may name files that a user creates)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


# ---- the GEMM backends -------------------------------------------------------------------------


def source_backends():
    """The backend names in the order gemm_backends() returns them: src/gemm/scaled_mm.cpp's
    all_backends() list, each entry X_backend() being the backend whose name() is "X"."""
    text = _read(os.path.join("src", "gemm", "scaled_mm.cpp"))
    body = re.search(r"all_backends\(\)\s*\{(.*?)return list;", text, re.S).group(1)
    listed = re.findall(r"&(\w+)_backend\(\)", body)
    named = set()
    for path in glob.glob(os.path.join(ROOT, "src", "gemm", "**", "*.*"), recursive=True):
        if path.endswith((".cpp", ".cu")):
            with open(path, encoding="utf-8") as f:
                named |= set(re.findall(r'name\(\) const override \{ return "(\w+)"; \}', f.read()))
    assert listed and set(listed) == named, (listed, named)
    return listed


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("FP8ROUTE_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("FP8ROUTE_CLI does not name the fp8route binary")
    return path


def test_backend_error_example_lists_the_backends_of_the_source():
    doc = " ".join(_read(os.path.join("docs", "cli.md")).split())
    m = re.search(r"`--backend: unknown 'nope' \(expected ([a-z0-9_, ]+), comma-separated\)`", doc)
    assert m, "docs/cli.md: the example --backend error was not found"
    assert m.group(1).split(", ") == source_backends()


def test_backend_error_example_is_what_the_cli_prints(cli):
    doc = " ".join(_read(os.path.join("docs", "cli.md")).split())
    example = re.search(r"`(--backend: unknown 'nope' \([^`]*\))`", doc).group(1)
    r = subprocess.run([cli, "bench", "--backend", "nope"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r
    assert example in r.stderr, f"fp8route bench --backend nope prints:\n{r.stderr}\ndocs/cli.md says:\n{example}"


def test_default_backend_lists_are_every_backend_but_reference():
    want = ",".join(b for b in source_backends() if b != "reference")
    found = 0
    for path in DOCS:
        for m in re.finditer(r"every backend but `reference`[:(]? ?\(?`([a-z0-9_,]+)`", _read(path)):
            found += 1
            assert m.group(1) == want, f"{path}: {m.group(0)!r}, the backends are {want}"
    assert found >= 3, "the default --backend lists of cli.md, routing.md and benchmarks.md were not found"


# ---- docs/cli.md's defaults against --help -----------------------------------------------------


def _sections(text):
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^## (.*)", line)
        if m:
            cur = out.setdefault(m.group(1).strip(), [])
        elif cur is not None:
            cur.append(line)
    return out


def _option_rows(lines):
    """{--option: (options of the row, default cell)} of a markdown table whose first cell names options."""
    rows = {}
    for line in lines:
        if not line.startswith("| `-"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        names = re.findall(r"(--[a-z0-9-]+)", cells[0])
        for n in names:
            rows[n] = (names, cells[-1].replace("`", ""))
    return rows


def _default_for(command, option, row):
    """The default a docs/cli.md cell gives `option` of `command`: the cell, its `command: value`
    part when it has one per command, or the option's place in a row naming several options."""
    names, cell = row
    for labels, value in re.findall(r"(?:^|[;(]\s*)([a-z]+(?:, [a-z]+)*): ([^;)]+)", cell):
        if command in labels.split(", "):
            return value.strip()
    cell = re.sub(r"\s*\([a-z]+(?:, [a-z]+)*: [^)]*\)", "", cell).strip()
    if len(names) > 1:
        parts = [p.strip() for p in cell.split(",")]
        if len(parts) == len(names):
            return parts[names.index(option)]
    return cell


@pytest.mark.parametrize("command", ["bench", "tune", "probe", "explain"])
def test_cli_md_defaults_are_the_cli_defaults(cli, command):
    text = subprocess.run([cli, command, "--help"], capture_output=True, text=True, timeout=60).stdout
    sections = _sections(_read(os.path.join("docs", "cli.md")))
    own, workload = _option_rows(sections[f"fp8route {command}"]), _option_rows(sections["Workload options"])
    checked, wrong = 0, []
    for m in re.finditer(r"^\s{2}(?:-\w,)?(--[a-z0-9-]+) [A-Z]+(?::\S+(?: in \[[^\]]*\])?)?=(\S+)", text, re.M):
        option, value = m.groups()
        row = own.get(option) or workload.get(option)
        assert row, f"docs/cli.md has no row for fp8route {command} {option}"
        doc = _default_for(command, option, row)
        checked += 1
        if not (doc == value or re.search(r"(?<![\w,])" + re.escape(value) + r"(?![\w,])", doc)
                or (value == "tensor,row,block" and doc == "all three")):
            wrong.append(f"{option}: --help says {value}, docs/cli.md says {doc!r}")
    assert checked >= 4, text  # the help was parsed
    assert not wrong, f"fp8route {command}:\n  " + "\n  ".join(wrong)


# ---- docs/python.md's signatures against the package -------------------------------------------


def _split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def package_signatures():
    """{name: [(file, [(parameter, default source or None)])]} of every public function and method
    of python/fp8route (self and cls left out)."""
    sigs = collections.defaultdict(list)
    for folder, _, files in os.walk(os.path.join(ROOT, "python", "fp8route")):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                    continue
                a = node.args
                pos = a.posonlyargs + a.args
                defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
                params = [(p.arg, d and ast.unparse(d)) for p, d in zip(pos, defaults)]
                params += [("*" + a.vararg.arg, None)] if a.vararg else []
                params += [(p.arg, d and ast.unparse(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
                params += [("**" + a.kwarg.arg, None)] if a.kwarg else []
                if params and params[0][0] in ("self", "cls"):
                    params = params[1:]
                sigs[node.name].append((os.path.relpath(path, ROOT), params))
    return sigs


def _disagreement(doc_params, params):
    """Why the documented parameter list does not describe `params`, or None. `...` stands for
    parameters left out; a default the doc gives must be the code's (compared as literals)."""
    tokens = _split_params(doc_params.replace("\n", " "))
    partial = "..." in tokens
    tokens = [t for t in tokens if t != "..."]
    order = [n for n, _ in params]
    defaults = dict(params)
    last = -1
    for t in tokens:
        name, eq, default = (s.strip() for s in t.partition("="))
        if name not in defaults:
            return f"{name} is not a parameter"
        if order.index(name) < last:
            return f"{name} is out of order"
        last = order.index(name)
        if eq and defaults[name] is None:
            return f"{name} has no default in the code"
        if eq:
            try:
                same = ast.literal_eval(default) == ast.literal_eval(defaults[name])
            except (ValueError, SyntaxError):
                same = True  # not a literal (torch.bfloat16): not compared
            if not same:
                return f"{name}={default}, the code's default is {defaults[name]}"
    missing = [n for n in order if n not in [t.partition("=")[0].strip() for t in tokens]]
    if missing and not partial:
        return "leaves out " + ", ".join(missing)
    return None


def test_python_md_signatures_are_the_packages():
    sigs = package_signatures()
    assert {"scaled_mm", "per_token_quant", "from_float"} <= set(sigs)  # the parse found them
    doc = _prose(_read(os.path.join("docs", "python.md")))
    checked, wrong = 0, []
    for m in re.finditer(r"`(?:fp8route\.|torch\.ops\.fp8route\.)?([a-z_][a-z0-9_]*)\(([^`()]*(?:\([^`()]*\)[^`()]*)*)\)`", doc):
        name, params = m.groups()
        # A bare name() refers to the function; "(..., x=v)" is a call with an argument, not a signature.
        if name not in sigs or not params.strip() or params.strip().startswith("..."):
            continue
        checked += 1
        why = [_disagreement(params, p) for _, p in sigs[name]]
        if all(why):
            wrong.append(f"{name}({params}): " + "; ".join(f"{f}: {w}" for (f, _), w in zip(sigs[name], why)))
    assert checked >= 30, checked
    assert not wrong, "docs/python.md:\n  " + "\n  ".join(wrong)


# ---- what the docs cite exists -----------------------------------------------------------------


def gtest_names():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "tests", "*.c*")):
        with open(path, encoding="utf-8") as f:
            names |= {f"{s}.{t}" for s, t in re.findall(r"\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", f.read())}
    return names


@pytest.mark.parametrize("path", DOCS)
def test_cited_tests_exist(path):
    names = gtest_names()
    suites = {n.split(".")[0] for n in names}
    assert {"Route", "GemmBackends"} <= suites, suites  # the scan found the suites
    text = _read(path)
    missing = sorted({m for m in re.findall(r"\b([A-Z]\w+\.(?:DISABLED_)?[A-Z]\w+)\b", text)
                      if m.split(".")[0] in suites and m not in names})
    # Suite binaries (test_route) and Python test files; the peers' test files that
    # tests/python/test_engine_tests.py re-creates are named by it.
    engine_tests = _read(os.path.join("tests", "python", "test_engine_tests.py"))
    for name in sorted(set(re.findall(r"(?<![\w/.-])(test_[a-z0-9_]+)(?:\.py)?(?![\w])", text))):
        if not any(os.path.exists(os.path.join(ROOT, "tests", name + ext)) for ext in (".cpp", ".cu")) \
                and not os.path.exists(os.path.join(ROOT, "tests", "python", name + ".py")) \
                and name + ".py" not in engine_tests:
            missing.append(name)
    assert not missing, f"{path} cites tests that do not exist: {missing}"


_TOP = "src|include|tools|python|bench|scripts|tests|examples|routes|shapes|fuzz|cmake|docs"


@pytest.mark.parametrize("path", DOCS)
def test_cited_files_and_links_exist(path):
    text = _read(path)
    missing = []
    # Repository paths in the prose (patterns with * { } < > are globs or placeholders).
    for m in re.finditer(r"(?<![\w/.$<-])(?:\.\./)?((?:%s)/[A-Za-z0-9_./*{}<>-]*[A-Za-z0-9_/])" % _TOP, _prose(text)):
        p = m.group(1)
        if not any(c in p for c in "*{}<>") and not os.path.exists(os.path.join(ROOT, p)):
            missing.append(p)
    # Relative links and their anchors.
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), target)) if target else os.path.join(ROOT, path)
        if not os.path.exists(full):
            missing.append(link)
        elif anchor and full.endswith(".md") and anchor not in _anchors(full):
            missing.append(link)
    assert not missing, f"{path} names what does not exist: {missing}"


def _anchors(path):
    """GitHub's heading anchors of a markdown file."""
    with open(path, encoding="utf-8") as f:
        text = _prose(f.read())
    seen, out = collections.Counter(), set()
    for heading in re.findall(r"^#{1,6} (.*)$", text, re.M):
        a = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(a if not seen[a] else f"{a}-{seen[a]}")
        seen[a] += 1
    return out


# ---- the shipped routing table -----------------------------------------------------------------


@pytest.fixture(scope="module")
def table():
    with open(os.path.join(ROOT, "routes", "h200.json"), encoding="utf-8") as f:
        return json.load(f)


def _routed(table):
    """{backend: (entries routing to it at some M, breakpoints, sorted measured M)}."""
    entries, breakpoints, ms = collections.Counter(), collections.Counter(), collections.defaultdict(set)
    for e in table["entries"]:
        for b in {bp[1] for bp in e["breakpoints"]}:
            entries[b] += 1
        for bp in e["breakpoints"]:
            breakpoints[bp[1]] += 1
        for rec in e["measured"]:
            ms[rec[1]].add(rec[0])
    return {b: (entries[b], breakpoints[b], sorted(ms[b])) for b in ms}


def test_routing_md_table_of_the_shipped_table(table):
    doc = _read(os.path.join("docs", "routing.md"))
    m = re.search(r"`routes/h200\.json` \((\d+) entries, (\w+)\)", doc)
    assert m, "docs/routing.md: '`routes/h200.json` (N entries, dtype)' not found"
    assert int(m.group(1)) == len(table["entries"])
    assert {e["out"] for e in table["entries"]} == {m.group(2)}
    rows = dict((b, (int(e), int(bp), [int(x) for x in re.findall(r"\d+", ms)])) for b, e, bp, ms in re.findall(
        r"^\| `(\w+)` \| (\d+) \| (\d+) \| ([\d, ]+) \|$", doc, re.M))
    routed = _routed(table)
    assert rows, "docs/routing.md: the per-backend table of the shipped table was not found"
    assert rows == routed, f"docs/routing.md says {rows}, routes/h200.json holds {routed}"


@pytest.mark.parametrize("path", DOCS)
def test_what_docs_say_of_the_decode_backend_in_the_table(path, table):
    """A statement that `decode` is not in the shipped table, or of the M it was measured at, is
    checked against the table."""
    if path == os.path.join("docs", "design.md") and "The `decode` backend is not in" in _read(path):
        pytest.xfail("docs/design.md says the decode backend is not in the shipped table")
    text = " ".join(_read(path).split())
    decode = _routed(table)["decode"]
    for m in re.finditer(r"`decode` backend is not in\s+the shipped", text):
        assert decode[1] == 0, f"{path}: says decode is not in the shipped table; it routes {decode[1]} breakpoints"
    for m in re.finditer(r"`decode` backend runs M <= (\d+); the shipped table measured it at M = ([\d, and]+)", text):
        assert int(m.group(1)) == max(decode[2])
        assert [int(x) for x in re.findall(r"\d+", m.group(2))] == decode[2], f"{path}: {m.group(0)}"
