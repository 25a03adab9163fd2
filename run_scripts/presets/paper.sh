# PRESET=paper: the paper's literal settings wherever its text is unambiguous, in place of this
# repository's defaults (README.md: "Defaults that differ from the paper"; each row of
# docs/design.md says why the default differs). Sourced by run_scripts/common.sh; the overrides
# come after the script's own and before the command line's, so `PRESET=paper bash
# run_scripts/qwen3_4b_arise.sh arise.selection.gate=0.25` still takes the command line's value.
# Kept at the defaults (already the paper's): sigma's companions epsilon 0.1 and delta 0.35, C_c 10,
# C_r 100, beta 0.9, the 5 seeds, N_w 500, r_skill 1, the summary's T 0.7 / top-p 0.95 / 192 tokens,
# 2 traces of 400 chars, the trace_abstract fallback (App. D.1), EVICT/LOAD by utility, every cache
# skill scored, Alg. 1's per-trajectory z_i.
PRESET_OVERRIDES=(
  # sigma = 1.0, fixed (App. A.1); the default calibrates it (temperature: auto)
  arise.selection.temperature=1.0
  # s_k = the SUM of the skill's token log-probs (Eq. 2; App. C.4 "summing"); the default is the mean
  arise.selection.score_norm=sum
  # no control arm: every trajectory of a Phase II group follows the manager (the default leaves 25% unaided)
  arise.selection.control_share=0
  # Alg. 1 / App. C.4: z_i per trajectory, every cache skill a candidate (the defaults, stated for the record)
  arise.selection.granularity=trajectory
  arise.selection.score_top_m=0
  # Alg. 1: one summary rollout O_{G+1} per query with tau+ (the default: 1 per step, App. E)
  arise.summary.max_per_step=-1
  arise.summary.stream=false
  # App. D.1: a document over 220 chars after clipping is discarded (the default shrinks it)
  arise.summary.on_overlong=discard
  # App. C.2 ADD: a new skill enters with utility 0 and no protection (the default gives it a fair trial)
  arise.library.new_skill_policy=literal
  # the seeds are ordinary entries (the default keeps them until used 8 times, so they reach Phase II)
  arise.library.seed_trial_uses=0
  arise.library.rank_by=utility
  # App. C.2 ADD has no duplicate check (the default drops a skill whose name and key insight match an entry's)
  arise.library.dedupe=false
)
