"""rlscope.collectors and rlscope.dashboards resolve installed from a wheel, editable, and from the root."""

from __future__ import annotations

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
