"""Packaging habits: one verl pin (core and gpu extra), `recipe` a namespace package, no bare top-level packages,
every data file of the package shipped as package data."""

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_verl_pin_matches_required_verl():
    pin = (REPO / "REQUIRED_VERL.txt").read_text().strip()
    deps = _pyproject()["project"]["dependencies"]
    assert pin in deps, f"pyproject.toml pins {[d for d in deps if d.startswith('verl')]}, REQUIRED_VERL.txt {pin}"


def test_the_gpu_extra_pins_the_same_verl_with_its_vllm_extra():
    # scripts/install_gpu.sh installs ".[gpu]": verl's own vLLM pins, at REQUIRED_VERL.txt's version
    version = (REPO / "REQUIRED_VERL.txt").read_text().strip().split("==")[1]
    assert f"verl[vllm]=={version}" in _pyproject()["project"]["optional-dependencies"]["gpu"]


def test_the_install_scripts_install_what_the_extras_name():
    assert '"$ROOT[gpu,envs]"' in (REPO / "scripts" / "install_gpu.sh").read_text()
    assert '"$ROOT[cpu,test,envs]"' in (REPO / "scripts" / "install_cpu.sh").read_text()


def test_the_envs_extra_pins_the_environments_the_adapters_were_tested_on():
    # recipe/arise/envs drives the packages' Java interfaces directly: a new jar can change them
    envs = _pyproject()["project"]["optional-dependencies"]["envs"]
    assert envs == ["textworld-express==1.1.0", "scienceworld==1.2.3"]
    assert 'EXTRAS = ("gpu", "envs")' in (REPO / "scripts" / "gpu_stack.py").read_text()  # the GPU resolution too


def test_recipe_is_a_namespace_package():
    assert not (REPO / "recipe" / "__init__.py").exists()
    find = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    assert find["namespaces"] is True and find["include"] == ["recipe.arise*"]


def test_no_bare_top_level_python_packages():
    bare = [p.name for p in REPO.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert bare == [], f"top-level Python packages would claim generic import names: {bare}"


def test_every_data_file_of_the_package_is_package_data():
    # a file the code reads at run time (config, seed skills, the report's template) that no
    # package-data glob names is left out of the wheel, and `pip install .` then fails only when used
    globs = _pyproject()["tool"]["setuptools"]["package-data"]
    root = REPO / "recipe" / "arise"
    files = [
        p for p in root.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert any(p.suffix == ".j2" for p in files)  # the check sees the template
    listed = {f for pkg, patterns in globs.items() for g in patterns for f in REPO.joinpath(*pkg.split(".")).glob(g)}
    unlisted = [str(p.relative_to(REPO)) for p in files if p not in listed]
    assert unlisted == [], f"not in [tool.setuptools.package-data], so not installed: {unlisted}"


def test_the_cpu_install_leaves_an_up_to_date_venv_as_it_is(tmp_path):
    """README command 1 after command 2 (CI): the venv is stamped with the install's inputs and left as
    it is; a changed input (here the stamp) reinstalls."""
    import hashlib
    import subprocess

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # any call to it means the install ran
    python.write_text(f"#!/bin/sh\necho called >> {tmp_path / 'calls'}\nexit 3\n")
    python.chmod(0o755)
    inputs = ("scripts/install_cpu.sh", "pyproject.toml", "requirements/cpu-constraints.txt")
    key = hashlib.sha256(b"".join((REPO / f).read_bytes() for f in inputs)).hexdigest()[:16]
    (venv / ".arise-install").write_text(key + "\n")
    script = str(REPO / "scripts" / "install_cpu.sh")
    proc = subprocess.run(["bash", script, str(venv)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "up to date" in proc.stdout and not (tmp_path / "calls").exists()
    (venv / ".arise-install").write_text("stale\n")
    proc = subprocess.run(["bash", script, str(venv)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and (tmp_path / "calls").exists()  # it installed (into the fake python)
    assert not (venv / ".arise-install").exists()  # and a failed install leaves no stamp
