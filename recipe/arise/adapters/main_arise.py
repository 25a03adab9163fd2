"""Entry point: ``python -m recipe.arise.adapters.main_arise [hydra overrides]``.

Composes ``recipe/arise/config/arise_trainer.yaml`` (verl's ``ppo_trainer`` plus the ``arise:``
section) and hands it to verl's own ``main_ppo`` entry, which starts Ray and the v1 trainer
registered as ``trainer.v1.trainer_mode`` (``arise``: verl's sync trainer; verl's mode names are
turned into the ARISE trainer registered for them, :mod:`~recipe.arise.adapters.trainer_modes`).
"""

import os
import sys

import hydra

from recipe.arise.core.arise_overrides import check_arise_overrides

REGISTER_MODULE = "recipe.arise.adapters.verl_register"


def _ensure_registered_everywhere() -> None:
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if REGISTER_MODULE not in modules:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules + [REGISTER_MODULE])


@hydra.main(config_path="../config", config_name="arise_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import main as verl_main

    from recipe.arise.adapters.trainer_modes import arise_trainer_mode

    mode = config.trainer.v1.trainer_mode
    config.trainer.v1.trainer_mode = arise_trainer_mode(mode)  # verl's name -> ARISE's; refuses what ARISE lacks
    if config.trainer.v1.trainer_mode != mode:
        print(f"[arise] trainer.v1.trainer_mode={mode}: the ARISE trainer {config.trainer.v1.trainer_mode}", flush=True)
    # Called with a composed config, a hydra entry point just runs its task function.
    verl_main(config)


if __name__ == "__main__":
    try:  # a mistyped arise key (SKIP_PREFLIGHT=1): the schema's message before Hydra's "append it with +"
        check_arise_overrides(sys.argv[1:])
    except ValueError as error:
        sys.exit(f"[arise] ERROR {error}")
    _ensure_registered_everywhere()  # before `import verl` anywhere, so Ray workers inherit it
    main()
