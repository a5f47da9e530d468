"""`modeling/` is the single source of the model code: the editable install and a wheel both expose it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import dlite_hf.modeling.modeling_dlite as modeling_module

ROOT = Path(__file__).resolve().parents[1]
FILES = ("configuration_dlite.py", "modeling_dlite.py", "generation_dlite.py", "suffix_index.py")


def test_editable_install_imports_the_repository_modeling_folder():
    assert Path(modeling_module.__file__).resolve() == (ROOT / "modeling" / "modeling_dlite.py").resolve()


def test_wheel_contains_the_modeling_files_once(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dlite_hf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in FILES:
        matches = [n for n in names if n.endswith("/" + name)]
        assert matches == [f"dlite_hf/modeling/{name}"], matches
        assert zipfile.ZipFile(wheel).read(matches[0]) == (ROOT / "modeling" / name).read_bytes()
    assert "dlite_hf/templates/model_card.md" in names


def test_shipped_drafter_links_to_the_single_source():
    for name in FILES:
        path = ROOT / "drafters" / "dlite-smollm2-135m" / name
        assert path.is_symlink() and path.resolve() == (ROOT / "modeling" / name).resolve()
