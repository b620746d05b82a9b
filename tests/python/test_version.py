"""Every place that states fp8route's version agrees (CPU, no build needed): pyproject.toml's
version, CMakeLists.txt's project version (from which version.h, `fp8route --version` and
fp8route.__version__ come), the newest CHANGELOG.md entry, the major.minor that the C++ examples
and docs ask find_package for, and docs/cpp.md's FP8ROUTE_VERSION. With the native module built,
fp8route.__version__ too."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _one(pattern, text, where):
    found = re.findall(pattern, text, re.M)
    assert len(found) == 1, f"{where}: expected one match of {pattern!r}, got {found}"
    return found[0]


def version():
    return _one(r'^version = "([^"]+)"', _read("pyproject.toml"), "pyproject.toml")


def test_pyproject_and_cmake_agree():
    cmake = _one(r"^project\(fp8route VERSION (\S+) ", _read("CMakeLists.txt"), "CMakeLists.txt")
    assert re.fullmatch(r"\d+\.\d+\.\d+", cmake), cmake
    assert version() == cmake


def test_changelog_names_the_version_first():
    entries = re.findall(r"^## (\d+\.\d+\.\d+)\s*$", _read("CHANGELOG.md"), re.M)
    assert entries and entries[0] == version(), entries


@pytest.mark.parametrize("path", [("examples", "cpp", "CMakeLists.txt"), ("tests", "consumer", "CMakeLists.txt"),
                                  ("docs", "install.md")])
def test_find_package_asks_for_this_minor_version(path):
    # SameMinorVersion compatibility: 0.2.x satisfies a request for 0.2 and no other.
    asked = _one(r"find_package\(fp8route (\d+\.\d+)", _read(*path), "/".join(path))
    assert asked == ".".join(version().split(".")[:2])


def test_cpp_docs_state_the_version():
    stated = _one(r'`FP8ROUTE_VERSION` \(`"([^"]+)"`\)', _read("docs", "cpp.md"), "docs/cpp.md")
    assert stated == version()


def test_the_built_module_reports_it():
    try:
        import fp8route
    except ImportError as e:
        pytest.skip(f"fp8route's native module is not built here: {e}")
    assert fp8route.__version__ == version()
