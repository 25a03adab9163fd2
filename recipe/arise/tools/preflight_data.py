"""The preflight's data-row check: the rows the training's dataset (``recipe.arise.adapters.dataset``)
would refuse at start-up, found before a run — a row without ``reward_model.ground_truth``, an
empty prompt, and with ``data.filter_overlong_prompts=False`` and ``data.truncation=error`` a prompt
over ``data.max_prompt_length`` tokens (when the tokenizer is a local folder)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from recipe.arise.data_prep.schema import describe_faults, file_row_faults
from recipe.arise.tools.preflight_common import Finding, listed_files, select

FIX = "rebuild the file with data_prep (it skips such rows, docs/data.md), or remove the rows"


def _files(cfg) -> list[str]:
    files = [f for key in ("data.train_files", "data.val_files") for f in listed_files(select(cfg, key))]
    return list(dict.fromkeys(f for f in files if "://" not in f and os.path.isfile(f)))  # missing: check_data_paths


def _token_counter(cfg):
    """A prompt-length function, where the run refuses over-long prompts and the tokenizer is local."""
    data = cfg.data
    if data.get("filter_overlong_prompts", False) or data.get("truncation", "error") != "error":
        return None, None
    model = cfg.actor_rollout_ref.model
    path = str(model.get("tokenizer_path") or model.path)
    if not Path(path).is_dir():
        return None, f"tokenizer {path} is not a local folder: prompt lengths are checked at load"
    if data.get("tool_config_path", None) or data.get("function_tool_path", None):
        # verl counts the tool list in the prompt (RLHFDataset.tool_schemas): the dataset has it, not this check
        return None, "tools configured: prompt lengths (with the tool list) are checked at load"
    from verl.utils import hf_tokenizer

    from recipe.arise.adapters.dataset import prompt_tokens

    with contextlib.redirect_stdout(io.StringIO()):
        tokenizer = hf_tokenizer(path, trust_remote_code=bool(model.get("trust_remote_code", False)))
    chat = data.get("apply_chat_template_kwargs", None) or {}
    return (lambda messages: prompt_tokens(tokenizer, messages, chat)), None


def check_data_rows(cfg) -> list[Finding]:
    files = _files(cfg)
    if not files:
        return []
    count_tokens, note = _token_counter(cfg)
    prompt_key = str(cfg.data.get("prompt_key", "prompt"))
    limit = int(cfg.data.max_prompt_length)
    rows, faults = 0, []
    for path in files:
        n, found = file_row_faults(path, prompt_key, count_tokens, limit)
        rows, faults = rows + n, faults + found
    findings = [Finding("INFO", note)] if note else []
    if faults:
        return findings + [Finding("ERROR", describe_faults(faults, rows), FIX)]
    lengths = f", prompts <= {limit} tokens" if count_tokens else ""
    what = f"data rows: {rows} in {len(files)} file(s) have a prompt and a ground truth{lengths}"
    return findings + [Finding("OK", what)]
