"""The trainer restoring a saved library with this run's settings (recipe.arise.adapters.trainer); the
library's own reconfiguration is tested in tests/core/test_library.py."""

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.skill import SkillDoc


def doc(i, name=None):
    return SkillDoc(name or f"skill_{i}", "general", f"insight number {i}", (f"step a {i}", f"step b {i}"), "check it")


def _used_library():
    lib = SkillLibrary(4, 6, 0.9, [doc(i) for i in range(4)], new_skill_policy="literal", seed_trial_uses=0)
    ids = lib.cache_ids()
    lib.step([(ids[0], 2.0), (ids[1], 1.0), (ids[2], 0.0), (ids[3], 2.0), (ids[3], 2.0)], [], 1)
    return lib


def _restoring_trainer(tmp_path, caplog, val_only=False, **library):
    from types import SimpleNamespace

    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    trainer = SimpleNamespace(
        arise=ARISEConfig.from_dict({"library": library}),
        config=SimpleNamespace(trainer={"val_only": val_only}),
        global_steps=1,
    )
    trainer._library_settings = ARISETrainer._library_settings.__get__(trainer)
    return lambda path: ARISETrainer._restore_library(trainer, str(path))


def test_resume_applies_the_runs_library_settings_and_says_so(tmp_path, caplog):
    import logging

    lib = _used_library()
    lib.save(tmp_path / "lib.parquet")
    restore = _restoring_trainer(tmp_path, caplog, cache_capacity=2, seed_trial_uses=0, new_skill_policy="literal")
    with caplog.at_level(logging.WARNING, logger="recipe.arise.adapters.trainer"):
        back = restore(tmp_path / "lib.parquet")
    assert back.cache_capacity == 2 and len(back.cache) == 2 and back.reservoir_capacity == 100
    assert "cache_capacity: 4 (saved) -> 2 (now)" in caplog.text and "reservoir_capacity: 6" in caplog.text
    assert "moved 2 cache skill(s) to the reservoir" in caplog.text
    assert back.ema_beta == 0.9 and back.trial_uses == 8  # the run's values (here the file's too)


def test_evaluation_keeps_the_saved_library_and_says_what_it_did_not_apply(tmp_path, caplog):
    import logging

    lib = _used_library()
    lib.save(tmp_path / "lib.parquet")
    restore = _restoring_trainer(tmp_path, caplog, val_only=True, cache_capacity=2)
    with caplog.at_level(logging.WARNING, logger="recipe.arise.adapters.trainer"):
        back = restore(tmp_path / "lib.parquet")
    assert back == SkillLibrary.load(tmp_path / "lib.parquet")
    assert "not applied" in caplog.text and "cache_capacity: 4 (saved) -> 2 (this run)" in caplog.text
