"""The users' GPU stack, resolved from PyPI without installing it.

The GPU install (scripts/install_gpu.sh) is ``pip install -e ".[gpu,envs]"``: this project's
dependencies plus its ``gpu`` extra (``verl[vllm]``, transferqueue) and ``envs`` (the text
environments). Nothing here has a GPU, so the set of distributions that install brings is found
with pip's resolver alone (``pip install --dry-run --ignore-installed --report``: metadata only)
against PyPI, with the local pip configuration (constraints, find-links, extra indexes) switched
off, so the result is what a user on a clean machine gets. Tests import this module:

- ``resolve()`` -> ``{name: version}`` (canonical names), cached per requirement set;
- ``sources(name)`` -> the unpacked wheel of the resolved version (for contract tests that read
  the GPU stack's vLLM / transformers / verl sources; compiled extensions left out).

Cache (``$ARISE_CACHE_DIR``, default ``~/.cache/arise``): ``gpu-resolve/<key>.json`` (pip's
report; key = hash of the requirements, Python version, platform and index) and
``gpu-src/wheels/*.whl`` unpacked to ``gpu-src/<wheel file name without .whl>/``.
``$ARISE_GPU_STACK`` may name a file of ``name==version`` lines (the dry run's output, as CI
writes it); ``resolve()`` then reads it instead of resolving.

usage: python scripts/gpu_stack.py resolve [--refresh]   # name==version, one a line, sorted
       python scripts/gpu_stack.py sources NAME          # path of the unpacked wheel
       python scripts/gpu_stack.py requirements          # the requirement inputs
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX_URL = os.environ.get("ARISE_GPU_INDEX_URL", "https://pypi.org/simple")
EXTRAS = ("gpu", "envs")  # the pyproject extras the GPU install adds to the core dependencies
# pip settings a clean machine has too (certificates, network); every other PIP_* is dropped
KEEP_PIP_ENV = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES", "PIP_CACHE_DIR"}


class ResolutionError(RuntimeError):
    """pip could not resolve the GPU stack (a conflict, or PyPI unreachable)."""


def canonical(name: str) -> str:
    """PEP 503 name normalisation (``Foo_Bar`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_dir() -> Path:
    return Path(os.environ.get("ARISE_CACHE_DIR", Path.home() / ".cache" / "arise"))


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser
        from pip._vendor import tomli as tomllib
    return tomllib.loads(path.read_text())


def requirements() -> list[str]:
    """The requirement inputs of the GPU install: the project's dependencies and its extras (EXTRAS)."""
    project = _toml(ROOT / "pyproject.toml")["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        if extra not in project.get("optional-dependencies", {}):
            raise ResolutionError(f"pyproject.toml has no [project.optional-dependencies] {extra!r}")
        reqs += project["optional-dependencies"][extra]
    return reqs


def _key(reqs: list[str]) -> str:
    inputs = {
        "requirements": sorted(reqs),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "platform": f"{sys.platform}-{platform.machine()}",
        "index": INDEX_URL,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _pip(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in KEEP_PIP_ENV}
    env["PIP_CONFIG_FILE"] = os.devnull  # no global/user pip.conf: no constraints, find-links, extra indexes
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    cmd = [sys.executable, "-m", "pip", *args, "--index-url", INDEX_URL]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ResolutionError(f"`{' '.join(cmd)}` took more than {timeout:.0f} s") from exc


@contextlib.contextmanager
def _locked(path: Path):
    """One process at a time fills a cache entry (tests and CI may start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def report_path(refresh: bool = False) -> Path:
    """pip's --report JSON for the GPU install, resolved once per requirement set and cached."""
    reqs = requirements()
    path = cache_dir() / "gpu-resolve" / f"{_key(reqs)}.json"
    with _locked(path):
        if path.exists() and not refresh:
            return path
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            # not --quiet: on a conflict pip says which requirements clash at info level
            args = ["install", "--dry-run", "--ignore-installed", "--report", str(report), *reqs]
            proc = _pip(args, timeout=900)
            if proc.returncode != 0 or not report.exists():
                lines = (proc.stdout + proc.stderr).strip().splitlines()
                tail = "\n".join(
                    line
                    for line in lines[-40:]
                    if not line.lstrip().startswith(("Collecting", "Using", "Downloading", "━"))
                )
                raise ResolutionError(f"pip cannot resolve the GPU stack ({' '.join(reqs)}):\n{tail}")
            shutil.move(report, path)
    return path


def _from_report(path: Path) -> dict[str, str]:
    install = json.loads(path.read_text())["install"]
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in install}


def _from_lines(path: Path) -> dict[str, str]:
    resolved = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        name, sep, version = line.strip().partition("==")
        if not sep or not name or not version:
            raise ResolutionError(f"{path}:{number}: expected name==version, got {line!r}")
        resolved[canonical(name)] = version
    if not resolved:  # never a valid stack: e.g. the file a dry run is still being written into
        raise ResolutionError(f"{path}: no name==version line (ARISE_GPU_STACK names an empty file)")
    return resolved


def resolve(refresh: bool = False, given: str | None = None) -> dict[str, str]:
    """``{canonical name: version}`` of everything the GPU install brings (``given``, default
    ``$ARISE_GPU_STACK``: a file of the dry run's lines to read instead of resolving)."""
    given = os.environ.get("ARISE_GPU_STACK") if given is None else given
    if given and not refresh:
        return _from_lines(Path(given))
    return _from_report(report_path(refresh))


def sources(name: str) -> Path:
    """The unpacked wheel (package folders + .dist-info) of ``name`` at its resolved version."""
    version = resolve().get(canonical(name))
    if version is None:
        raise KeyError(f"{name} is not part of the resolved GPU stack")
    root = cache_dir() / "gpu-src"
    stem = f"{canonical(name).replace('-', '_')}-{version}-"
    with _locked(root / "wheels" / f"{stem}unpack"):
        found = sorted(p for p in root.glob(f"{stem}*") if p.is_dir())
        if found:
            return found[0]
        wheels = root / "wheels"
        wheel = next(iter(sorted(wheels.glob(f"{stem}*.whl"))), None)
        if wheel is None:
            args = ["download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(wheels), f"{name}=={version}"]
            proc = _pip(args, timeout=1800)
            wheel = next(iter(sorted(wheels.glob(f"{stem}*.whl"))), None)
            if proc.returncode != 0 or wheel is None:
                raise ResolutionError(f"pip cannot download {name}=={version}: {(proc.stderr or proc.stdout)[-2000:]}")
        target = root / wheel.name[: -len(".whl")]
        partial = Path(tempfile.mkdtemp(dir=root, prefix=".unpack-"))
        try:
            with zipfile.ZipFile(wheel) as archive:
                # compiled extensions are left out: nothing here can load them (no GPU), and they are
                # most of vLLM's size; every .py file and the .dist-info metadata are kept
                members = [m for m in archive.namelist() if not re.search(r"\.so(\.[\d.]+)?$", m)]
                archive.extractall(partial, members)
            partial.rename(target)  # atomic: a reader never sees half a wheel
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    res = sub.add_parser("resolve", help="print the resolved set, name==version one a line")
    res.add_argument("--refresh", action="store_true", help="resolve again, ignoring the cache")
    src = sub.add_parser("sources", help="print the path of a resolved distribution's unpacked wheel")
    src.add_argument("name")
    sub.add_parser("requirements", help="print the requirement inputs")
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            # the dry run always resolves: its output is what $ARISE_GPU_STACK names (CI writes it there)
            for name, version in sorted(resolve(args.refresh, given="").items()):
                print(f"{name}=={version}")
        elif args.command == "sources":
            print(sources(args.name))
        else:
            print("\n".join(requirements()))
    except (ResolutionError, KeyError) as exc:
        print(f"gpu_stack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
