"""verl's RLHFDataset refusing the rows a run would otherwise take quietly (``data.custom_cls``,
set in ``config/arise_trainer.yaml``, so every entry point, preflight or not, loads data through it).

At load, before verl reads the files: a row without ``reward_model.ground_truth`` (graded 0 on every
trajectory) or with an empty prompt raises :class:`DataRowError` naming the file, row and field
(``recipe.arise.data_prep.schema.file_row_faults``, the preflight's check too). Over-long prompts:

- ``data.filter_overlong_prompts=True``: verl drops them; the count goes to the console
  (``[arise] data: ...``) and to the tracker (``arise/rows_dropped``, ``arise/val_rows_dropped``).
- ``False`` with ``data.truncation=error``: one raises, named like the rows above. verl 0.9.1's
  dataset no longer truncates; its agent loop left-truncates any prompt over
  ``rollout.prompt_length`` with a log line, whatever ``data.truncation`` says.
- ``False`` with another ``truncation``: verl's agent loop truncates them, as asked.

Cost: one pyarrow read of the prompt and reward_model columns; prompts are tokenized only in the
second case, where verl's own filter (the same tokenization) is off.
"""

from __future__ import annotations

from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tokenizer import normalize_token_ids

from recipe.arise.data_prep.schema import DataRowError, describe_faults, file_row_faults

__all__ = ["ARISEDataset", "DataRowError", "prompt_tokens"]

TOKENIZE_KEYS = ("tokenize", "return_dict", "return_tensors")  # verl drops these from the filter's kwargs too


def prompt_tokens(tokenizer, messages, chat_template_kwargs=None, tools=None) -> int:
    """A text prompt's length as verl's ``filter_overlong_prompts`` counts it (chat template with
    the generation prompt; ``RLHFDataset.maybe_filter_out_long_prompts``)."""
    kwargs = {k: v for k, v in dict(chat_template_kwargs or {}).items() if k not in TOKENIZE_KEYS}
    if tools is not None:
        kwargs["tools"] = tools
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **kwargs)
    return len(normalize_token_ids(ids))


class ARISEDataset(RLHFDataset):
    rows_dropped = 0  # rows verl's filter_overlong_prompts dropped at the last load

    def _read_files_and_tokenize(self):
        count_tokens = None
        if not self.filter_overlong_prompts and self.truncation == "error" and self.processor is None:

            def count_tokens(messages):
                return prompt_tokens(self.tokenizer, messages, self.apply_chat_template_kwargs, self.tool_schemas)

        rows, faults = 0, []
        for shown, local in zip(self.original_data_files, self.data_files, strict=True):
            n, found = file_row_faults(local, self.prompt_key, count_tokens, self.max_prompt_length, str(shown))
            rows, faults = rows + n, faults + found
        if faults:
            raise DataRowError(
                describe_faults(faults, rows) + " (python -m recipe.arise.tools.preflight lists them before a run)"
            )
        super()._read_files_and_tokenize()

    def maybe_filter_out_long_prompts(self, dataframe=None):
        before = len(dataframe)
        kept = super().maybe_filter_out_long_prompts(dataframe)
        self.rows_dropped = before - len(kept)
        if self.rows_dropped:
            files = ", ".join(str(f) for f in self.original_data_files)
            print(
                f"[arise] data: {self.rows_dropped} of {before} rows of {files} dropped, prompt over "
                f"data.max_prompt_length={self.max_prompt_length} tokens (data.filter_overlong_prompts=True)",
                flush=True,
            )
        return kept
