"""The programs in examples/ are the README's examples: the README's Python example appears line for
line in examples/linear.py, the C++ example's calls in examples/cpp/linear.cpp (no GPU needed); with
a CUDA device, examples/linear.py runs and checks its result against torch. (examples/cpp is built
against the installed package and run by scripts/consumer_test.sh.)"""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_block(lang):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```" + lang + r"\n(.*?)```", text, re.S)
    assert len(blocks) == 1, f"README: expected one {lang} block, found {len(blocks)}"
    return [line.strip() for line in blocks[0].splitlines() if line.strip()]


def test_readme_python_example_is_examples_linear_py():
    program = {line.strip() for line in open(os.path.join(ROOT, "examples", "linear.py"))}
    missing = [line for line in readme_block("python") if line not in program]
    assert not missing, f"README lines not in examples/linear.py: {missing}"


def test_readme_cpp_example_calls_are_in_examples_cpp():
    program = open(os.path.join(ROOT, "examples", "cpp", "linear.cpp")).read()
    for call in ("LinearPlan plan(", "per_token_quant(", "plan.run(", "plan.explain(", "TensorView::contiguous("):
        assert any(call in line for line in readme_block("cpp")), f"README's C++ example lost {call}"
        assert call in program, f"examples/cpp/linear.cpp lacks {call}"


def test_python_example_runs_on_a_gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed (the example uses it)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the example needs one)")
    path = [os.path.join(ROOT, "python")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "linear.py")], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stdout + r.stderr
