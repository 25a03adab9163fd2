"""The CPU smoke run's tiny assets in a preflight of ``run_scripts/cpu_smoke_arise.sh`` itself.

Printing its overrides builds nothing: without ``TINY_DIR`` the script names its assets
``TINY_PLACEHOLDER/<module>`` (``recipe.arise.cpu.tiny``, ``tiny_tool``, ``tiny_env`` or
``tiny_env_sw``). Where that module's assets are already in the content-keyed cache (the folder a
launch takes), the preflight checks those in the placeholder's place: the model, and its tokenizer
for the prompt lengths of the run's data, the user's own files included. Otherwise what stands on the placeholder
is reported as built at launch, and a resume is not compared on it (the launch's real path is not
known yet).
"""

from __future__ import annotations

from pathlib import Path

from recipe.arise.tools.preflight_common import TINY_PLACEHOLDER, Finding

MODULES = tuple(f"recipe.arise.cpu.{m}" for m in ("tiny", "tiny_tool", "tiny_env", "tiny_env_sw"))


def cache_folder(module: str) -> Path:
    """Where ``python -m MODULE --cached`` keeps its assets (``cached_assets``' target, not built)."""
    from recipe.arise.cpu import asset_cache, tiny

    if module == "recipe.arise.cpu.tiny":
        return asset_cache.cache_root() / f"tiny-{tiny.ASSETS_FAMILY}-{tiny.assets_key()}"
    if module == "recipe.arise.cpu.tiny_env":
        from recipe.arise.cpu import tiny_env

        return tiny_env.cache_folder()
    if module == "recipe.arise.cpu.tiny_env_sw":
        from recipe.arise.cpu import tiny_env_sw

        return tiny_env_sw.cache_folder()
    from recipe.arise.cpu import tiny_tool

    return asset_cache.cache_root() / f"tiny-{tiny.ASSETS_FAMILY}-tool-{tiny_tool.TOOL}-{tiny_tool.assets_key()}"


def resolve_placeholder(overrides: list[str]) -> tuple[list[str], list[Finding]]:
    """``overrides`` with the placeholder replaced by the cached assets' folder where they are built."""
    found = {m for m in MODULES for o in overrides if f"{TINY_PLACEHOLDER}/{m}/" in o}
    findings = []
    for module in sorted(found):
        folder = cache_folder(module)
        stand_in = f"{TINY_PLACEHOLDER}/{module}"
        if not (folder / "tiny_assets.json").is_file():
            findings.append(
                Finding(
                    "INFO",
                    f"the CPU smoke run's tiny assets ({module}) are not built yet: the launch builds them into "
                    f"{folder}; the model and the prompt lengths are not checked here",
                    f"python -m {module} --cached builds them (~1-2 min); TINY_DIR=<a folder of built assets>",
                )
            )
            continue
        overrides = [o.replace(stand_in, str(folder)) for o in overrides]
        findings.append(Finding("OK", f"the CPU smoke run's tiny assets: {folder} (the cache the launch takes)"))
    return overrides, findings
