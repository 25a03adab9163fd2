# Settings shared by ARISE and every GRPO-family baseline (paper §4.1, App. A.1): same data,
# same budget. Source it, then append method-specific overrides to COMMON_OVERRIDES.
# Every path and size can be overridden by environment variables.
DATA_DIR=${DATA_DIR:-$HOME/data/arise}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train/deepscaler.parquet}
VAL_FILES=${VAL_FILES:-"['$DATA_DIR/eval/aime24.parquet','$DATA_DIR/eval/aime25.parquet','$DATA_DIR/eval/amc23.parquet']"}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TRAIN_BATCH=${TRAIN_BATCH:-64}              # effective batch of 64 queries per policy update
GROUP_SIZE=${GROUP_SIZE:-8}                 # G
MAX_PROMPT=${MAX_PROMPT:-1024}              # room for the question plus an injected skill (~80 tokens)
MAX_RESPONSE=${MAX_RESPONSE:-4096}
LR=${LR:-1e-6}
TOTAL_STEPS=${TOTAL_STEPS:-2000}
MICRO_BATCH=${MICRO_BATCH:-4}               # per-device batch 4 (the paper accumulates over 2 steps)
TP=${TP:-1}
GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.6}
SAVE_FREQ=${SAVE_FREQ:-100}
TEST_FREQ=${TEST_FREQ:-100}
CKPT_DIR=${CKPT_DIR:-checkpoints/${PROJECT:-arise}/${EXPERIMENT:-run}}
LOGGER=${LOGGER:-"['console','file']"}

COMMON_OVERRIDES=(
  data.train_files="$TRAIN_FILES"
  data.val_files="$VAL_FILES"
  data.train_batch_size=$TRAIN_BATCH
  data.max_prompt_length=$MAX_PROMPT
  data.max_response_length=$MAX_RESPONSE
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=$LR
  actor_rollout_ref.actor.optim.weight_decay=0.01
  actor_rollout_ref.actor.optim.lr_warmup_steps=50
  actor_rollout_ref.actor.optim.lr_scheduler_type=cosine
  actor_rollout_ref.actor.clip_ratio=0.2
  actor_rollout_ref.actor.ppo_mini_batch_size=$TRAIN_BATCH
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.n=$GROUP_SIZE
  actor_rollout_ref.rollout.tensor_model_parallel_size=$TP
  actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEM_UTIL
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH
  actor_rollout_ref.rollout.enable_prefix_caching=True
  actor_rollout_ref.rollout.val_kwargs.n=${VAL_N:-4}
  actor_rollout_ref.rollout.val_kwargs.do_sample=True
  actor_rollout_ref.rollout.val_kwargs.temperature=0.6
  actor_rollout_ref.rollout.val_kwargs.top_p=0.95
  algorithm.adv_estimator=grpo
  algorithm.use_kl_in_reward=False
  trainer.logger="$LOGGER"
  trainer.project_name=${PROJECT:-arise}
  trainer.experiment_name=${EXPERIMENT:-run}
  trainer.default_local_dir="$CKPT_DIR"
  trainer.n_gpus_per_node=$GPUS_PER_NODE
  trainer.nnodes=$NNODES
  trainer.total_training_steps=$TOTAL_STEPS
  trainer.total_epochs=100
  trainer.save_freq=$SAVE_FREQ
  trainer.test_freq=$TEST_FREQ
  trainer.val_before_train=False
)

# run_main ENTRY OVERRIDES... : PRINT_OVERRIDES=1 prints them one per line instead of training
# (tests/test_run_scripts.py composes every script's overrides against the real config).
run_main() {
  local entry=$1; shift
  if [ "${PRINT_OVERRIDES:-0}" = 1 ]; then
    echo "ENTRY=$entry"; printf '%s\n' "$@"; return 0
  fi
  python -m "$entry" "$@"
}
