# Settings shared by ARISE, its ablations, the GRPO-family baselines and the evaluation (paper §4.1,
# App. A.1): same data, same budget, same engine. Source it after setting MODEL_PATH; it defines
#   ENGINE_OVERRIDES  model, attention, lengths, batch sizes, rollout engine, GPUs (training and evaluation)
#   TRAIN_OVERRIDES   data, optimiser, algorithm, trainer, logging (training only)
#   COMMON_OVERRIDES  ENGINE + TRAIN, then the CPU layer when CPU=1
#   EVAL_OVERRIDES    ENGINE, then the CPU layer when CPU=1
#   PRESET_OVERRIDES  PRESET=<name>: run_scripts/presets/<name>.sh's overrides (the scripts put them
#                     after their own and before the command line's)
#   run_main ENTRY OVERRIDES...   preflight, then `python -m ENTRY OVERRIDES...` through recipe.arise.tools.launch
# Every path and size is an environment variable (below). CPU=1 layers run_scripts/cpu_env.sh on top
# (the CPU smoke run and the CPU evaluation take this very path). Decisions: docs/gpu.md.
RUN_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }

# the CPU layer first: it sets the CPU platform variables and the tiny run's size defaults
CPU_LAYER=()
if [ "${CPU:-0}" = 1 ]; then  # 1: run on CPU (run_scripts/cpu_env.sh layered on top)
  source "$RUN_SCRIPTS/cpu_env.sh"
  CPU_LAYER=("${CPU_OVERRIDES[@]}")
fi

# PRESET=<name>: run_scripts/presets/<name>.sh may set environment defaults (`: "${VAR:=value}"`,
# read below; the CPU layer's sizes, set above, win) and defines the array PRESET_OVERRIDES
PRESET_OVERRIDES=()
if [ -n "${PRESET:-}" ]; then  # a preset of run_scripts/presets/ (paper: the literal values)
  case "$PRESET" in *[!A-Za-z0-9_-]*) echo "PRESET=$PRESET: letters, digits, _ and - only" >&2; exit 2 ;; esac
  [ -f "$RUN_SCRIPTS/presets/$PRESET.sh" ] ||
    { echo "PRESET=$PRESET: no run_scripts/presets/$PRESET.sh" >&2; exit 2; }
  source "$RUN_SCRIPTS/presets/$PRESET.sh"
fi

PYTHON=${PYTHON:-python}                   # the interpreter of the venv holding verl and this project
case "$PYTHON" in # a relative PYTHON (e.g. .venv/bin/python) keeps working whatever the cwd later is
  */*) PYTHON="$(cd "$(dirname "$PYTHON")" 2>/dev/null && pwd)/$(basename "$PYTHON")" ||
    { echo "PYTHON=$PYTHON: no such file" >&2; exit 2; } ;;
esac
[ -e "$MODEL_PATH" ] && MODEL_PATH=$(cd "$MODEL_PATH" && pwd) # a local model: absolute (Ray workers' cwd differs)

# The model's short name: the project, hence the checkpoint folder, of every run on it (ARISE, its
# ablations, the baselines: checkpoints/arise_<model>/<experiment>), and its length profile below
if [ -z "${MODEL_TAG:-}" ]; then  # the model's short name (project, checkpoint folder); from MODEL_PATH
  case "$(basename "$MODEL_PATH")" in
    Qwen3-4B-Instruct-2507) MODEL_TAG=qwen3_4b ;;
    Phi-4-mini-instruct) MODEL_TAG=phi4_mini ;;
    *) MODEL_TAG=$(basename "$MODEL_PATH" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9\n' '_') ;;
  esac
fi
PROJECT=${PROJECT:-arise_$MODEL_TAG}
# Phi-4-mini uses LongRoPE (original_max_position_embeddings 4096): vLLM applies the long factors
# at every position once max_model_len > 4096, the actor (transformers) only to micro-batches
# longer than 4096, so the two would compute different policies. Its runs keep max_model_len at
# 4096: 1024 (prompt) + 256 (skill) + 2816 (response). docs/gpu.md: LongRoPE.
case "$MODEL_TAG" in
  phi4_mini) : "${MAX_RESPONSE:=$((4096 - ${MAX_PROMPT:-1024} - ${SKILL_ROOM:-256}))}" ;;
esac

# TOOL=python: the tool-using agent (verl's multi-turn ToolAgentLoop with ARISE's skill layer,
# `arise_tool_agent`) with the sandboxed Python tool, on the tool-use data (data_prep/prepare_all.sh
# --tool python writes it to ~/data/arise_tool). docs/agent_loops.md
TOOL=${TOOL:-}                              # python: the tool-using agent and its sandboxed tool; unset: single-turn
case "$TOOL" in
  "" | python) ;;
  *) echo "unknown TOOL=$TOOL (python, or unset for the single-turn agent)" >&2; exit 2 ;;
esac
# ENV=<name>: the text-environment agent (`arise_env_agent`, multi-turn episodes with ARISE's skill
# layer) on that environment's games in DATA_DIR (default ~/data/arise/env/<name>, where
# docs/environments.md's `python -m recipe.arise.data_prep.env --env <name> --out ...` writes them:
# train.parquet, test.parquet)
ENV=${ENV:-}                                # twx | scienceworld | alfworld: the env agent there; unset: math
case "$ENV" in
  "" | twx | scienceworld | alfworld) ;;
  *) echo "unknown ENV=$ENV (twx, scienceworld, alfworld, or unset for the math task)" >&2; exit 2 ;;
esac
if [ -n "$ENV" ] && [ -n "$TOOL" ]; then
  echo "ENV=$ENV and TOOL=$TOOL together: a run has one agent (the env agent or the tool agent); unset one" >&2
  exit 2
fi
if [ -n "$ENV" ]; then
  DATA_DIR=$(abspath "${DATA_DIR:-$HOME/data/arise/env/$ENV}")
  TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train.parquet}
  VAL_FILES=${VAL_FILES:-$DATA_DIR/test.parquet}
  # Where the paper's math settings do not apply, the peers' (SkillRL / verl-agent on ALFWorld and
  # WebShop; docs/environments.md: GPU runs): 16 games x G=8 episodes a step (every episode holds an
  # environment: 128 JVMs, not the 512 of batch 64), 200 steps, Phase I the first quarter (as the
  # paper's 500 of 2,000). Turn budget: WebShop's 15 for TWX's short games, ALFWorld's 50 for
  # ALFWorld and ScienceWorld's long ones; every reply and observation shares the one response, ~450
  # tokens a turn.
  case "$ENV" in
    twx) : "${MAX_RESPONSE:=8192}" ;;
    scienceworld | alfworld) : "${ENV_TURNS:=50}" "${MAX_RESPONSE:=24576}" "${MICRO_BATCH:=1}" ;;
  esac
  # ALFWorld's games are read from the user's data folder in every worker (Ray's inherit this process's
  # environment): alfworld-download's default where unset
  if [ "$ENV" = alfworld ]; then
    ALFWORLD_DATA=${ALFWORLD_DATA:-$HOME/.cache/alfworld}  # ENV=alfworld: its data folder (alfworld-download's)
    export ALFWORLD_DATA
  fi
  # the task, the first observation and up to 40 admissible actions
  : "${MAX_PROMPT:=2048}" "${TRAIN_BATCH:=16}" "${TOTAL_STEPS:=200}"
  : "${PHASE1_STEPS:=50}"  # ENV runs' arise.phase1_steps (arise.sh: 500 otherwise, the paper's)
  : "${SAVE_FREQ:=50}" "${TEST_FREQ:=50}"
fi
DATA_DIR=$(abspath "${DATA_DIR:-$HOME/data/arise${TOOL:+_tool}}")  # data_prep/prepare_all.sh's output
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/train/deepscaler.parquet}
VAL_FILES=${VAL_FILES:-"['$DATA_DIR/eval/aime24.parquet','$DATA_DIR/eval/aime25.parquet','$DATA_DIR/eval/amc23.parquet']"}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TRAIN_BATCH=${TRAIN_BATCH:-64}              # effective batch of 64 queries per policy update
GROUP_SIZE=${GROUP_SIZE:-8}                 # G
MAX_PROMPT=${MAX_PROMPT:-1024}              # the question (data.max_prompt_length; longer ones are filtered out)
MAX_RESPONSE=${MAX_RESPONSE:-4096}
LR=${LR:-1e-6}
LR_WARMUP_STEPS=${LR_WARMUP_STEPS:-50}
LR_SCHEDULER=${LR_SCHEDULER:-cosine}       # cosine | constant
TOTAL_STEPS=${TOTAL_STEPS:-2000}
MICRO_BATCH=${MICRO_BATCH:-4}               # per-device batch 4 (the paper accumulates over 2 steps)
TP=${TP:-1}
GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.6}
SAVE_FREQ=${SAVE_FREQ:-100}
TEST_FREQ=${TEST_FREQ:-100}
KEEP_CKPTS=${KEEP_CKPTS:-3}                 # trainer.max_actor_ckpt_to_keep (each: fp32 weights + AdamW m, v)
VAL_BATCH=${VAL_BATCH:-128}                 # data.val_batch_size: questions per validation batch
# one folder per model x method/ablation (+ preset): a run resumes only its own checkpoints
CKPT_DIR=$(abspath "${CKPT_DIR:-checkpoints/$PROJECT/${EXPERIMENT:-run}}")
# verl's file logger opens its file with "wb": each launch writes a fresh file, and run_main moves
# the previous launch's file aside first (metrics.launchN.jsonl; report and verdict read them all)
VERL_FILE_LOGGER_PATH=$(abspath "${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics.jsonl}")
LOGGER=${LOGGER:-"['console','file']"}
STRATEGY=${STRATEGY:-fsdp2}                 # the actor's FSDP engine (the CPU end-to-end run uses the same)
# main_arise runs the ARISE trainer registered for verl's mode (docs/trainer_modes.md)
TRAINER_MODE=${TRAINER_MODE:-sync}          # verl's v1 trainer mode: sync | colocate_async | separate_async (docs/trainer_modes.md)
case "$TRAINER_MODE" in
  sync | colocate_async | separate_async) ;;
  *) echo "unknown TRAINER_MODE=$TRAINER_MODE (sync, colocate_async or separate_async)" >&2; exit 2 ;;
esac
# separate_async: the standalone rollout servers get GPUs of their own on every node (the trainer the
# rest), weights reach them through a checkpoint engine, and verl trains on PARAM_SYNC_STEP mini-batches
# of TRAIN_BATCH/PARAM_SYNC_STEP queries between two weight syncs (verl: train_batch = pss x mini)
PARAM_SYNC_STEP=${PARAM_SYNC_STEP:-1}       # separate_async: mini-batches (policy updates) per weight sync
MINI_BATCH=$TRAIN_BATCH
SEPARATE_OVERRIDES=()
if [ "$TRAINER_MODE" != separate_async ] && [ "$PARAM_SYNC_STEP" != 1 ]; then
  echo "PARAM_SYNC_STEP=$PARAM_SYNC_STEP: only separate_async trains several mini-batches per weight sync" >&2
  exit 2
fi
if [ "$TRAINER_MODE" = separate_async ]; then
  ROLLOUT_GPUS=${ROLLOUT_GPUS:-$((GPUS_PER_NODE / 2))}  # separate_async: each node's GPUs for rollout
  ROLLOUT_NNODES=${ROLLOUT_NNODES:-$NNODES}  # separate_async: nodes with rollout GPUs
  HYBRID_ENGINE=${HYBRID_ENGINE:-True}       # separate_async: also rollout replicas on the trainer's GPUs
  CKPT_ENGINE=${CKPT_ENGINE:-nccl}           # separate_async: the weight-sync backend (never naive)
  case "$PARAM_SYNC_STEP" in '' | *[!0-9]* | 0)
    echo "PARAM_SYNC_STEP=$PARAM_SYNC_STEP: a whole number >= 1" >&2; exit 2 ;;
  esac
  if [ $((TRAIN_BATCH % PARAM_SYNC_STEP)) != 0 ]; then
    echo "TRAIN_BATCH=$TRAIN_BATCH is no multiple of PARAM_SYNC_STEP=$PARAM_SYNC_STEP (separate_async)" >&2
    exit 2
  fi
  MINI_BATCH=$((TRAIN_BATCH / PARAM_SYNC_STEP))
  SEPARATE_OVERRIDES=(
    trainer.n_gpus_per_node=$((GPUS_PER_NODE - ROLLOUT_GPUS))
    actor_rollout_ref.rollout.nnodes=$ROLLOUT_NNODES
    actor_rollout_ref.rollout.n_gpus_per_node=$ROLLOUT_GPUS
    trainer.v1.separate_async.parameter_sync_step=$PARAM_SYNC_STEP
    ++actor_rollout_ref.hybrid_engine=$HYBRID_ENGINE
    actor_rollout_ref.rollout.checkpoint_engine.backend=$CKPT_ENGINE
  )
fi

# Rollout engine: vllm (default) or sglang (pip install "verl[sglang]==0.9.1"); both return the prompt
# log-probs the skill scoring needs in verl's layout (tests/contracts/test_prompt_logprobs.py).
ROLLOUT=${ROLLOUT:-vllm}
case "$ROLLOUT" in
  vllm | sglang) ;;
  *) echo "unknown ROLLOUT=$ROLLOUT (vllm|sglang)" >&2; exit 2 ;;
esac

# Actor attention. ATTN=auto (default): flash_attention_2 with packed micro-batches
# (use_remove_padding=True, verl's fast path) when flash_attn imports in $PYTHON, else sdpa (in torch)
# with padded micro-batches, the path the CPU end-to-end run exercises. `pip install verl[vllm]`
# does not bring flash-attn (docs/gpu.md: attention backend). ATTN=sdpa|flash_attention_2|eager forces one.
ATTN=${ATTN:-auto}
if [ "$ATTN" = auto ]; then
  if "$PYTHON" -c 'import flash_attn' >/dev/null 2>&1; then ATTN=flash_attention_2; else ATTN=sdpa; fi
fi
case "$ATTN" in
  flash_attention_2 | flash_attention_3) REMOVE_PADDING=${REMOVE_PADDING:-True} ;;
  *) REMOVE_PADDING=${REMOVE_PADDING:-False} ;;
esac

# rollout.max_model_len (vLLM otherwise sizes for the model's full context, 262,144 for
# Qwen3-4B-Instruct-2507): prompt + injected skill + the longer of the response and the summary
# rollout O_{G+1} (Figure-4 template + 2 traces clipped to 400 chars + 192 new tokens, on top of the
# question). Scoring requests (prompt + "\nSKILL:" + <=128 skill tokens) fit in prompt + SKILL_ROOM.
SKILL_ROOM=${SKILL_ROOM:-256}               # "SKILL:{json}\n": a <=220-char skill document
SUMMARY_ROOM=${SUMMARY_ROOM:-1536}          # tokens of the summary rollout O_{G+1}: prompt + traces + output
MAX_MODEL_LEN=${MAX_MODEL_LEN:-$((MAX_PROMPT + SKILL_ROOM + (MAX_RESPONSE > SUMMARY_ROOM ? MAX_RESPONSE : SUMMARY_ROOM)))}

ENGINE_OVERRIDES=(
  actor_rollout_ref.model.path="$MODEL_PATH"
  ++actor_rollout_ref.model.override_config.attn_implementation=$ATTN
  actor_rollout_ref.model.use_remove_padding=$REMOVE_PADDING
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  data.max_prompt_length=$MAX_PROMPT
  data.max_response_length=$MAX_RESPONSE
  data.train_batch_size=$TRAIN_BATCH
  actor_rollout_ref.actor.strategy=$STRATEGY
  actor_rollout_ref.actor.ppo_mini_batch_size=$MINI_BATCH
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH
  actor_rollout_ref.rollout.name=$ROLLOUT
  actor_rollout_ref.rollout.tensor_model_parallel_size=$TP
  actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEM_UTIL
  actor_rollout_ref.rollout.max_model_len=$MAX_MODEL_LEN
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH
  actor_rollout_ref.rollout.enable_prefix_caching=True
  data.val_batch_size=$VAL_BATCH
  trainer.n_gpus_per_node=$GPUS_PER_NODE
  trainer.nnodes=$NNODES
  ${SEPARATE_OVERRIDES[@]+"${SEPARATE_OVERRIDES[@]}"}
)
[ -n "${MAX_NUM_SEQS:-}" ] && ENGINE_OVERRIDES+=(actor_rollout_ref.rollout.max_num_seqs=$MAX_NUM_SEQS)
# the tool agent: every assistant turn, tool call and (clipped) tool result shares the response's
# MAX_RESPONSE tokens (the preflight checks TOOL_TURNS x TOOL_RESPONSE against it)
TOOL_TURNS=${TOOL_TURNS:-4}                 # multi_turn.max_assistant_turns
TOOL_RESPONSE=${TOOL_RESPONSE:-256}         # multi_turn.max_tool_response_length (tokens of one tool result)
TOOL_OVERRIDES=()
if [ -n "$TOOL" ]; then
  TOOL_OVERRIDES=(
    actor_rollout_ref.rollout.agent.default_agent_loop=arise_tool_agent
    actor_rollout_ref.rollout.multi_turn.enable=True
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$(cd "$RUN_SCRIPTS/.." && pwd)/recipe/arise/config/${TOOL}_tool.yaml"
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$TOOL_TURNS
    actor_rollout_ref.rollout.multi_turn.max_tool_response_length=$TOOL_RESPONSE
    actor_rollout_ref.rollout.multi_turn.format=${TOOL_FORMAT:-hermes}
  )
  ENGINE_OVERRIDES+=("${TOOL_OVERRIDES[@]}")
fi

# the env agent: every reply and every observation shares the response's MAX_RESPONSE tokens; the
# episode ends after ENV_TURNS replies (verl's turn budget; the rows name the agent loop too)
ENV_TURNS=${ENV_TURNS:-15}                  # multi_turn.max_assistant_turns of an episode (scienceworld: 50)
if [ -n "$ENV" ]; then
  ENGINE_OVERRIDES+=(
    actor_rollout_ref.rollout.agent.default_agent_loop=arise_env_agent
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$ENV_TURNS
  )
fi

TRAIN_OVERRIDES=(
  data.train_files="$TRAIN_FILES"
  data.val_files="$VAL_FILES"
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.actor.optim.lr=$LR
  actor_rollout_ref.actor.optim.weight_decay=0.01
  actor_rollout_ref.actor.optim.lr_warmup_steps=$LR_WARMUP_STEPS
  actor_rollout_ref.actor.optim.lr_scheduler_type=$LR_SCHEDULER
  actor_rollout_ref.actor.clip_ratio=0.2
  # Eq. 5: each trajectory's token terms averaged, then the trajectories (verl's default, token-mean,
  # weighs a trajectory by its length); the baselines get the same unless their method defines its own
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.rollout.n=$GROUP_SIZE
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
  trainer.max_actor_ckpt_to_keep=$KEEP_CKPTS
  trainer.total_training_steps=$TOTAL_STEPS
  trainer.total_epochs=100
  trainer.save_freq=$SAVE_FREQ
  trainer.test_freq=$TEST_FREQ
  trainer.val_before_train=False
)
# verl's file logger reads VERL_FILE_LOGGER_PATH in the TaskRunner (a Ray actor): it goes through
# Ray's runtime env, so it also holds on a Ray cluster started beforehand
TRAIN_OVERRIDES+=("++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=$VERL_FILE_LOGGER_PATH")
[ -n "${HYDRA_DIR:-}" ] && TRAIN_OVERRIDES+=("hydra.run.dir=$(abspath "$HYDRA_DIR")")
# sync keeps the yaml's trainer_mode (arise: the ARISE trainer on verl's sync one)
[ "$TRAINER_MODE" = sync ] || TRAIN_OVERRIDES+=("trainer.v1.trainer_mode=$TRAINER_MODE")

COMMON_OVERRIDES=("${ENGINE_OVERRIDES[@]}" "${TRAIN_OVERRIDES[@]}" ${CPU_LAYER[@]+"${CPU_LAYER[@]}"})
EVAL_OVERRIDES=("${ENGINE_OVERRIDES[@]}" ${CPU_LAYER[@]+"${CPU_LAYER[@]}"})

# rotate_metrics FILE: a non-empty FILE (an earlier launch's metrics) becomes FILE's next free
# launch part, <stem>.launchN.jsonl (N = 1, 2, ... in launch order), so that no launch truncates
# another's metrics (recipe.arise.tools.report.read_metrics reads the parts, then FILE)
rotate_metrics() {
  local file=$1 stem n=1
  [ -s "$file" ] || return 0
  stem=${file%.jsonl}
  while [ -e "$stem.launch$n.jsonl" ]; do n=$((n + 1)); done
  mv "$file" "$stem.launch$n.jsonl"
  echo "[arise] the previous launch's metrics: $stem.launch$n.jsonl"
}

# run_main ENTRY OVERRIDES...
#   PRINT_OVERRIDES=1: print ENTRY=<module> and one override per line, start nothing
#   (tests/test_run_scripts.py composes and validates every script's final config from this)
#   otherwise: python -m recipe.arise.tools.preflight (config, resume, disk and memory checks, no GPU
#   touched; it records the run's settings in the checkpoint folder) unless SKIP_PREFLIGHT=1, then
#   the previous launch's metrics file is moved aside and the run starts
run_main() {
  local entry=$1
  shift
  if [ "${PRINT_OVERRIDES:-0}" = 1 ]; then  # 1: print the final overrides, start nothing
    echo "ENTRY=$entry"
    printf '%s\n' "$@"
    return 0
  fi
  if [ "${SKIP_PREFLIGHT:-0}" != 1 ]; then  # 1: start without recipe.arise.tools.preflight
    # with LOG_FILE (the concise console) the preflight prints only what is not OK and its verdict
    "$PYTHON" -m recipe.arise.tools.preflight --record ${LOG_FILE:+--brief} "$entry" "$@" ||
      { echo "[arise] preflight failed (see above); SKIP_PREFLIGHT=1 starts the run anyway" >&2; return 1; }
  fi
  mkdir -p "$(dirname "$VERL_FILE_LOGGER_PATH")"
  rotate_metrics "$VERL_FILE_LOGGER_PATH"
  export VERL_FILE_LOGGER_PATH
  # the start-up path of every launch (training, baselines, evaluation): recipe.arise.tools.launch.
  # LOG_FILE set: the whole output (Ray, vLLM, verl) goes there (an earlier launch's becomes
  # <stem>.launchN.log), the console gets what starts, the trainer's one line per step, the rows
  # dropped at load, a progress line during long waits and, on failure, the run's last lines
  # (VERBOSE=1: every line). Ray's start-up timing out is launched once more; the run's processes,
  # shared memory and sandbox folders are removed when it ends.
  local log=()
  if [ -n "${LOG_FILE:-}" ]; then  # a file for the whole output; the console gets one line per step
    log=(--log "$LOG_FILE")
  fi
  # VERBOSE=1: every line on the console too (the launcher reads it)
  VERBOSE=${VERBOSE:-0} "$PYTHON" -m recipe.arise.tools.launch ${log[@]+"${log[@]}"} -- "$PYTHON" -m "$entry" "$@"
}
