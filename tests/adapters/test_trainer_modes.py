"""The ARISE trainer per verl v1 trainer mode (recipe/arise/adapters/trainer_modes.py, trainers.py):
verl's names map to ARISE's registered trainers, each pins its base's ``trainer_mode``, the async ones
hand out ARISE's rollout client, and the preflight refuses a mode ARISE has no trainer for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from recipe.arise.adapters.trainer_modes import TrainerModeError, arise_trainer_mode
from recipe.arise.tools import preflight

CONFIG = "ARISE config (arise: section)"


@pytest.mark.parametrize(
    "name,registered",
    [
        ("arise", "arise"),
        ("sync", "arise"),
        ("colocate_async", "arise_colocate_async"),
        ("arise_colocate_async", "arise_colocate_async"),
        ("separate_async", "arise_separate_async"),
        ("arise_separate_async", "arise_separate_async"),
    ],
)
def test_verls_and_arises_names_give_the_registered_trainer(name, registered):
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls

    from recipe.arise.adapters import trainers  # noqa: F401  (registers them)

    assert arise_trainer_mode(name) == registered
    assert issubclass(get_trainer_cls(registered), trainers.ARISEHooks)


def test_a_mode_without_an_arise_trainer_is_refused_by_name():
    known = "one of sync \\(arise\\), colocate_async \\(arise_colocate_async\\), separate_async"
    with pytest.raises(TrainerModeError, match="'fully_async' is no ARISE trainer; " + known):
        arise_trainer_mode("fully_async")


@pytest.mark.parametrize(
    "cls,mode",
    [
        ("ARISETrainer", "sync"),
        ("ARISEColocateAsyncTrainer", "colocate_async"),
        ("ARISESeparateAsyncTrainer", "separate_async"),
    ],
)
def test_each_trainer_pins_its_bases_mode(cls, mode):
    from recipe.arise.adapters import trainers

    trainer = object.__new__(getattr(trainers, cls))
    trainer.trainer_mode = "arise_colocate_async"  # verl's __init__ assigns the config value
    assert trainer.trainer_mode == mode


@pytest.mark.parametrize(
    "cls,manager",
    [("ARISEColocateAsyncTrainer", "llm_server_manager"), ("ARISESeparateAsyncTrainer", "standalone_server_manager")],
)
def test_the_async_trainers_hand_out_arises_client_of_their_bases_servers(cls, manager):
    """colocate_async: the hybrid servers; separate_async: the standalone ones (verl's own choice)."""
    from recipe.arise.adapters import trainers
    from recipe.arise.adapters.llm_client import ARISEAsyncLLMClient

    asked = []
    servers = SimpleNamespace(get_client=lambda **kw: asked.append(kw))
    other = SimpleNamespace(get_client=lambda **kw: pytest.fail("the other servers' client"))
    stub = SimpleNamespace(llm_server_manager=other, standalone_server_manager=other)
    setattr(stub, manager, servers)
    getattr(trainers, cls).get_llm_client(stub)
    assert asked == [{"client_cls": ARISEAsyncLLMClient}]


@pytest.mark.parametrize(
    "mode,level,text",
    [
        ("colocate_async", "OK", "trainer arise_colocate_async"),
        ("arise_colocate_async", "OK", "trainer arise_colocate_async"),
        ("separate_async", "OK", "trainer arise_separate_async"),
    ],
)
def test_the_preflight_checks_the_trainer_mode(tmp_path, mode, level, text):
    overrides = ["actor_rollout_ref.rollout.name=vllm", f"trainer.default_local_dir={tmp_path}"]
    cfg = preflight.compose(preflight.ARISE_ENTRY, overrides + [f"trainer.v1.trainer_mode={mode}"])
    findings = preflight.check_config(cfg, preflight.ARISE_ENTRY, check_paths=False, check_runtime=False)
    (finding,) = [f for f in findings if f.what.startswith(CONFIG + ":")]
    assert finding.level == level and text in finding.what, finding
