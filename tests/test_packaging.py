"""rlscope.collectors and rlscope.dashboards resolve installed from a wheel, editable, and from the root."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import rlscope, rlscope.collectors, rlscope.dashboards; print(rlscope.collectors.__file__); print(rlscope.dashboards.__file__)"


def _run(args: list[str], cwd: Path, **kw) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _env_with(name: str, value: str | None) -> dict[str, str]:
    """This environment with ``name`` set to ``value``, or without it (None)."""
    env = {k: v for k, v in os.environ.items() if k != name}
    return env if value is None else {**env, name: value}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        ROOT,
    )
    (path,) = out.glob("rlscope-*.whl")
    return path


def test_wheel_maps_folders_into_the_rlscope_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlscope/collectors/__init__.py" in names and "rlscope/dashboards/__init__.py" in names
    assert not [n for n in names if n.split("/")[0] in ("collectors", "dashboards", "tests", "sample_traces")]


def test_installed_wheel_imports_from_elsewhere(wheel, tmp_path):
    target = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], tmp_path)
    code = f"import sys; sys.path.insert(0, {str(target)!r}); {PROBE}"
    out = _run([sys.executable, "-c", code], tmp_path).split()
    assert out == [str(target / "rlscope/collectors/__init__.py"), str(target / "rlscope/dashboards/__init__.py")]


def test_repo_root_without_any_install(tmp_path):
    # -S skips site-packages' .pth files (so no editable finder); dependencies are added back by hand
    purelib, platlib = sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]
    code = f"import sys; sys.path += [{purelib!r}, {platlib!r}]; {PROBE}"
    out = _run([sys.executable, "-S", "-c", code], ROOT).split()
    assert out == [str(ROOT / "collectors/__init__.py"), str(ROOT / "dashboards/__init__.py")]


def test_console_script_and_module_entry_point(tmp_path):
    assert _run([sys.executable, "-m", "rlscope", "--version"], tmp_path).startswith("rlscope ")
    usage = _run([sys.executable, "-m", "rlscope", "--help"], tmp_path)
    assert "simulate" in usage and "info" in usage
    script = Path(sys.executable).parent / "rlscope"
    if script.exists():  # installed with pip (editable or not), as the README says
        assert "rlscope" in _run([str(script), "--version"], tmp_path)


def test_import_rlscope_stays_light(tmp_path):
    cases = [
        # a training job imports rlscope for its Recorder: pandas and pyarrow.dataset are the analyzers' business
        (
            "import sys, rlscope; print(sorted({'pandas', 'pyarrow.dataset', 'dash', 'pynvml', 'ray'} & set(sys.modules)))",
            "[]",
        ),
        # the console script imports rlscope.cli before main() can catch a Ctrl-C: nothing slow there
        ("import sys, rlscope.cli; print(sorted({'pyarrow', 'numpy'} & set(sys.modules)))", "[]"),
        (
            "import rlscope; from rlscope import Recorder, RunReader; print(Recorder.__name__, RunReader.__name__)",
            "Recorder RunReader",
        ),
        ("import rlscope; print({'Recorder', 'RunReader', '__version__'} <= set(dir(rlscope)))", "True"),
        # diagnose starts reading a run as soon as it has the reader: pyarrow.compute (0.07 s) comes after
        ("import sys, rlscope.trace.reader; print('pyarrow.compute' in sys.modules)", "False"),
        (
            "import rlscope.trace as t; print(t.Recorder.__name__, t.RunReader.__name__, 'steps' in t.TABLES)",
            "Recorder RunReader True",
        ),
        ("import rlscope.trace as t; print(t.store.write_meta is t.write_meta, hasattr(t, 'nothing'))", "True False"),
    ]
    for code, printed in cases:
        assert _run([sys.executable, "-c", code], tmp_path).strip() == printed, code


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("4", "4")])
def test_the_program_runs_blas_on_one_thread_unless_told(tmp_path, given, seen):
    # OpenBLAS's worker threads spin after each call; the program's fits are tiny (0.18 s of
    # diagnose's CPU went to the spinning). A user's own setting stands.
    code = (
        "import os, sys; from rlscope.cli import run; sys.argv = ['rlscope', '--version']\n"
        "try:\n    run()\nexcept SystemExit:\n    print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    out = _run([sys.executable, "-c", code], tmp_path, env=_env_with("OPENBLAS_NUM_THREADS", given))
    assert out.splitlines()[-1] == seen


@pytest.mark.parametrize(("env", "backend"), [(None, "jemalloc"), ("system", "system")])
def test_commands_allocate_arrow_memory_with_jemalloc_unless_told(tmp_path, env, backend):
    import pyarrow as pa

    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        backend = "system"  # a pyarrow built without jemalloc falls back to the system allocator
    code = (
        "import sys, pyarrow as pa; from rlscope.cli import main; "
        "assert main(['info', sys.argv[1]]) == 0; print(pa.default_memory_pool().backend_name)"
    )
    run_env = _env_with("ARROW_DEFAULT_MEMORY_POOL", env)
    out = _run([sys.executable, "-c", code, str(ROOT / "sample_traces" / "healthy-colocated")], tmp_path, env=run_env)
    assert out.strip().splitlines()[-1] == backend
