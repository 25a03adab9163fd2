"""The preflight's trainer checks: settings verl's v1 trainer reads per trainer mode
(``trainer.v1.trainer_mode``), held to what that mode can run. docs/trainer_modes.md"""

from __future__ import annotations

from recipe.arise.adapters.trainer_modes import TRAINER_MODES
from recipe.arise.tools.preflight_common import Finding, select

# trainer.v1.trainer_mode -> the verl mode whose semantics the trainer runs under: each ARISE trainer
# pins its verl base's mode (recipe/arise/adapters/trainers.py), verl's own names are their own
VERL_MODE = {arise: verl for verl, arise in TRAINER_MODES.items()}
PSS_KEY = "trainer.v1.separate_async.parameter_sync_step"


def verl_mode(mode: str) -> str:
    return VERL_MODE.get(mode, mode)


def max_parameter_sync_step(mode: str) -> int | None:
    """The largest ``parameter_sync_step`` a trainer mode can run (None: no limit here). verl's
    ``PPOTrainer.step`` (verl/trainer/ppo/v1/trainer_base.py) samples that many batches per weight
    sync; the sync and colocate_async trainers stop the engines after each sampled batch
    (``on_sample_end``: sleep; colocate_async aborts too) and resume them only at ``on_step_end``, so
    the next batch's rollouts and dynamic sampling's refills would go to stopped engines. Only
    separate_async's standalone servers keep generating between syncs."""
    return None if verl_mode(mode) == "separate_async" else 1


def check_parameter_sync_step(cfg) -> list[Finding]:
    """``trainer.v1.<mode>.parameter_sync_step`` (what ``PPOTrainer.__init__`` reads, default 1) within
    :func:`max_parameter_sync_step` of the trainer mode; the run's own mode's section too (``arise``:
    verl does not read it, and a value there would be ignored without a word). Nothing set: []."""
    mode = str(select(cfg, "trainer.v1.trainer_mode", "sync"))
    limit = max_parameter_sync_step(mode)
    findings: list[Finding] = []
    for section in dict.fromkeys((verl_mode(mode), mode)):
        key = f"trainer.v1.{section}.parameter_sync_step"
        value = select(cfg, key)
        if value is None:
            continue
        steps = value if isinstance(value, int) and not isinstance(value, bool) else None
        if steps is None or steps < 1:
            findings.append(Finding("ERROR", f"{key}={value!r}: a whole number >= 1", f"{key}=1"))
        elif limit is not None and steps > limit:
            why = (
                f"under trainer_mode {mode} ({verl_mode(mode)} semantics) verl samples {steps} batches per "
                "global step and the rollout engines are stopped after each one (on_sample_end puts them to "
                "sleep): the next batch's rollouts and dynamic sampling's refills would go to sleeping engines"
            )
            findings.append(Finding("ERROR", f"{key}={steps}: {why}", f"{key}={limit} (or drop it)"))
    return findings


def _gpus(cfg, section: str) -> tuple[int, int]:
    return int(select(cfg, f"{section}.nnodes", 0) or 0), int(select(cfg, f"{section}.n_gpus_per_node", 0) or 0)


def check_separate_async(cfg, local_gpus: int | None = None) -> list[Finding]:
    """What verl's separate_async trainer asserts at start-up (``PPOTrainerSeparateAsync.__init__``),
    checked before any GPU is allocated, and what it would otherwise hang or fail on: a rollout
    pool of its own, a weight-sync backend other than ``naive``, ``train_batch_size ==
    parameter_sync_step x ppo_mini_batch_size``, no colocated reward model, and the trainer's plus
    the rollout's GPUs within what there is (``ray_kwargs.ray_init.num_gpus`` when set, else on one
    node ``local_gpus``, the GPUs nvidia-smi lists). Another mode: []."""
    if verl_mode(str(select(cfg, "trainer.v1.trainer_mode", "sync"))) != "separate_async":
        return []
    findings: list[Finding] = []
    rollout = "actor_rollout_ref.rollout"
    (r_nodes, r_gpus), (t_nodes, t_gpus) = _gpus(cfg, rollout), _gpus(cfg, "trainer")
    if r_nodes < 1 or r_gpus < 1:
        findings.append(
            Finding(
                "ERROR",
                f"{rollout}.nnodes={r_nodes}, {rollout}.n_gpus_per_node={r_gpus}: separate_async runs its rollout "
                "servers on GPUs of their own (verl asserts both > 0)",
                "ROLLOUT_NNODES=1 ROLLOUT_GPUS=<GPUs per node for rollout> (run_scripts/common.sh)",
            )
        )
    backend = select(cfg, f"{rollout}.checkpoint_engine.backend", "naive")
    if backend == "naive":
        findings.append(
            Finding(
                "ERROR",
                f"{rollout}.checkpoint_engine.backend=naive: it syncs weights only where actor and rollout share "
                "a process; separate_async's standalone servers need a transport (verl asserts it)",
                "CKPT_ENGINE=nccl on GPU (run_scripts/common.sh); on CPU arise_cpu (run_scripts/cpu_env.sh)",
            )
        )
    batch = select(cfg, "data.train_batch_size")
    mini = select(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    pss = select(cfg, PSS_KEY, 1)
    if None not in (batch, mini, pss) and batch != pss * mini:
        findings.append(
            Finding(
                "ERROR",
                f"data.train_batch_size={batch} != {PSS_KEY} {pss} x actor_rollout_ref.actor.ppo_mini_batch_size "
                f"{mini}: verl's separate_async trainer asserts they are equal",
                "PARAM_SYNC_STEP=<p>, TRAIN_BATCH a multiple of it (run_scripts/common.sh: mini = TRAIN_BATCH/p)",
            )
        )
    findings += _check_micro_batches(cfg, mini, t_nodes * t_gpus)
    if select(cfg, "reward.reward_model.enable", False) and not select(
        cfg, "reward.reward_model.enable_resource_pool", False
    ):
        findings.append(
            Finding(
                "ERROR",
                "reward.reward_model.enable_resource_pool=False: a reward model colocated with the trainer needs "
                "the rollout to pause, and separate_async's standalone servers never do (verl asserts it)",
                "reward.reward_model.enable_resource_pool=True (its own GPUs)",
            )
        )
    findings += _check_gpu_total(cfg, t_nodes * t_gpus, r_nodes * r_gpus, local_gpus)
    if not any(f.level == "ERROR" for f in findings):
        findings.append(
            Finding(
                "OK",
                f"separate_async: trainer {t_nodes}x{t_gpus} GPU(s), rollout {r_nodes}x{r_gpus}, backend {backend}, "
                f"{pss} mini-batch(es) of {mini} per weight sync",
            )
        )
    return findings


def _check_micro_batches(cfg, mini, trainer_gpus: int) -> list[Finding]:
    """Each of the ``parameter_sync_step`` sampled batches (``mini`` prompts x ``rollout.n``) is split
    over the trainer's GPUs and into micro-batches; without dynamic batch sizes verl asserts each
    GPU's share is whole micro-batches (``prepare_micro_batches``), first in ``compute_log_prob``."""
    n = select(cfg, "actor_rollout_ref.rollout.n", 1)
    findings = []
    for micro_key, dynamic_key in (
        (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        ),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.use_dynamic_bsz"),
    ):
        micro = select(cfg, micro_key)
        if not mini or not micro or not trainer_gpus or select(cfg, dynamic_key, False):
            continue
        if (mini * n) % (micro * trainer_gpus):
            name, seqs = micro_key.rsplit(".", 1)[1], mini * n
            what = (
                f"a mini-batch of {mini} x rollout.n {n} = {seqs} sequences over {trainer_gpus} trainer GPU(s) is no "
                f"whole number of {name}={micro}: verl asserts it (prepare_micro_batches)"
            )
            fix = f"MICRO_BATCH dividing {seqs // trainer_gpus or 1} (run_scripts/common.sh), or fewer PARAM_SYNC_STEP"
            findings.append(Finding("ERROR", what, fix))
    return findings


def _check_gpu_total(cfg, trainer: int, rollout: int, local_gpus: int | None) -> list[Finding]:
    ray_gpus = select(cfg, "ray_kwargs.ray_init.num_gpus")
    one_node = _gpus(cfg, "trainer")[0] <= 1 and _gpus(cfg, "actor_rollout_ref.rollout")[0] <= 1
    if ray_gpus is not None:
        available, where = int(ray_gpus), "ray_kwargs.ray_init.num_gpus"
    elif one_node and local_gpus is not None:
        available, where = local_gpus, "this node's GPUs (nvidia-smi)"
    else:
        why = "no GPU count here (no nvidia-smi)" if one_node else "several nodes' GPUs are Ray's to count"
        return [Finding("INFO", f"separate_async: trainer + rollout GPUs ({trainer} + {rollout}) not checked: {why}")]
    if trainer + rollout <= available:
        return []
    return [
        Finding(
            "ERROR",
            f"separate_async needs {trainer} trainer + {rollout} rollout GPU(s) = {trainer + rollout}, {where} "
            f"gives {available}: Ray would wait for the rollout pool's GPUs for ever",
            "fewer trainer GPUs (GPUS_PER_NODE is the node's, the trainer gets GPUS_PER_NODE - ROLLOUT_GPUS) "
            "or fewer ROLLOUT_GPUS",
        )
    ]


def check_trainer(cfg) -> list[Finding]:
    """Every trainer-mode check: :func:`check_parameter_sync_step`, :func:`check_separate_async` (on
    a GPU node, with the GPUs nvidia-smi lists there)."""
    local_gpus = None
    if verl_mode(str(select(cfg, "trainer.v1.trainer_mode", "sync"))) == "separate_async":
        if select(cfg, "trainer.device", "cuda") != "cpu":
            from recipe.arise.tools.preflight_gpu import gpu_models

            local_gpus = len(gpu_models() or []) or None
    return check_parameter_sync_step(cfg) + check_separate_async(cfg, local_gpus)
