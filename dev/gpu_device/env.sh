# the tiny-model gpu_check settings (sourced by gpu_run.sh; also used locally for PRINT_OVERRIDES)
G=${GPUC:-$PWD/.gpuc/run}
export MODEL_PATH=$G/tiny/model TRAIN_FILES=$G/tiny/data/train.parquet VAL_FILES=$G/tiny/data/val.parquet
export GPUS_PER_NODE=1 NNODES=1 TRAIN_BATCH=8 GROUP_SIZE=8 MICRO_BATCH=16 VAL_BATCH=64
export MAX_PROMPT=160 MAX_RESPONSE=288 SUMMARY_ROOM=608
export LR=1e-4 LR_WARMUP_STEPS=0 LR_SCHEDULER=constant
export STEPS=4 IG_EVERY=2 PHASE1_STEPS=1
export CKPT_DIR=${CKPT_ROOT:-/tmp/gpuc}/checkpoints VERL_FILE_LOGGER_PATH=${CKPT_ROOT:-/tmp/gpuc}/metrics.jsonl
export LOG_FILE=${CKPT_ROOT:-/tmp/gpuc}/run.log
