"""The trainer's Upload side (recipe.arise.adapters.trainer): the tau+ groups it reads back from verl's
batch (single-turn and tool-loop traces) and the exact information gain (App. D.3)."""

import itertools
from types import SimpleNamespace

from byte_tokenizer import ByteTokenizer
from skill_layer_host import scoring_context_of

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.skill import SkillDoc


def _library(*names):
    return SkillLibrary(seed_skills=[SkillDoc(n, "general", f"insight {n}", ("a", "b"), "c") for n in names])


# ------------------------------------------------------------------ exact IG (trainer adapter)


MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]


def _ig_trainer(train_manager=False):
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    cfg = ARISEConfig.from_dict({"selection": {"train_manager": train_manager}, "ig": {"max_traces": 4}})
    lib = _library("skill_a", "skill_b")
    trainer = SimpleNamespace(
        arise=cfg, tokenizer=ByteTokenizer(), config=SimpleNamespace(data={}), library=lib, prompts=[]
    )
    trainer._scoring_context = scoring_context_of(trainer.tokenizer)
    trainer._ig_context = ARISETrainer._ig_context.__get__(trainer)

    def generate_all(prompts, params, timeout_s):
        trainer.prompts += prompts
        # every prompt token gets log-prob -1, except 'x' (-5): a trace of x's is unlikely anywhere
        return [
            SimpleNamespace(
                extra_fields={"prompt_logprobs": [[-5.0 if t == ord("x") else -1.0] for t in p[1:]] + [[0]]}
            )
            for p in prompts
        ]

    trainer._generate_all = generate_all
    return trainer, ARISETrainer


def _enc(text):
    return [ord(c) for c in text]


def test_exact_ig_uses_the_unaided_trace_not_the_best_reward_one():
    trainer, cls = _ig_trainer()
    group = {
        "uid": "g1",
        "messages": MESSAGES,
        # tau+: an R=2 trace written under a skill comes first (best reward)
        "traces": [{"text": "", "reward": 2.0, "ids": _enc("skilled"), "skill_id": "s000001"}],
        # a correct unaided trace (R=1; outside tau+ beside R=2 ones)
        "unaided": [{"reward": 1.0, "ids": _enc("plain")}],
    }
    ig, skipped = cls._exact_ig(trainer, [group], step=100)
    assert set(ig) == set(trainer.library.cache_ids()) and skipped == 0
    traces = {bytes(p).decode().rsplit("|A:", 1)[1] for p in trainer.prompts}
    assert traces == {"plain"}
    # no unaided trace at all: nothing is measured (never a skill-written trace)
    trainer.prompts.clear()
    group_without = {**group, "unaided": []}
    assert cls._exact_ig(trainer, [group_without], step=200) == ({}, 0) and trainer.prompts == []


def test_exact_ig_without_an_unaided_list_takes_unaided_tau_plus_traces():
    trainer, cls = _ig_trainer()
    group = {
        "uid": "g1",
        "messages": MESSAGES,
        "traces": [
            {"text": "", "reward": 2.0, "ids": _enc("skilled"), "skill_id": "s000001"},
            {"text": "", "reward": 1.0, "ids": _enc("plain"), "skill_id": ""},
        ],
    }
    cls._exact_ig(trainer, [group], step=100)
    assert {bytes(p).decode().rsplit("|A:", 1)[1] for p in trainer.prompts} == {"plain"}


def test_exact_ig_injects_the_skill_where_the_agent_loop_does():
    for train_manager in (False, True):
        trainer, cls = _ig_trainer(train_manager)
        group = {"uid": "g1", "messages": MESSAGES, "traces": [], "unaided": [{"reward": 1.0, "ids": _enc("plain")}]}
        cls._exact_ig(trainer, [group], step=100)
        base, *with_skill = [bytes(p).decode() for p in trainer.prompts]
        assert base == "U:What is 1 plus 2?|A:plain"
        doc = trainer.library.cache[0].doc.to_json()
        if train_manager:  # the skill opens the assistant turn, as scored and trained
            assert with_skill[0] == f"U:What is 1 plus 2?|A:SKILL:{doc}\nplain"
        else:  # the skill line before the question in the user turn
            assert with_skill[0] == f"U:SKILL:{doc}\nWhat is 1 plus 2?|A:plain"


class _Jagged:
    """What TransferQueue hands back for a jagged tensor field (offsets, padded view)."""

    def __init__(self, rows):
        import torch

        self.rows, self.torch = rows, torch

    def offsets(self):
        lengths = [len(r) for r in self.rows]
        return self.torch.tensor([0, *itertools.accumulate(lengths)])

    def to_padded_tensor(self, padding):
        width = max(len(r) for r in self.rows)
        return self.torch.tensor([list(r) + [padding] * (width - len(r)) for r in self.rows])


def _tau_plus_group(monkeypatch, data):
    """The one tau+ group the trainer reads back from a batch whose fields verl's store returns as
    ``data`` (char tokens), and the fields it asked the store for."""
    import recipe.arise.adapters.trainer as trainer_mod
    import recipe.arise.adapters.trainer_upload as upload_mod

    asked = []
    monkeypatch.setattr(upload_mod.tq, "kv_batch_get", lambda **kw: asked.append(kw["select_fields"]) or dict(data))
    trainer = SimpleNamespace(arise=ARISEConfig(), tokenizer=ByteTokenizer())
    n = len(data["uid"])
    batch = SimpleNamespace(tags=[{}] * n, keys=list("abcd"[:n]), partition_id="train")
    (group,) = trainer_mod.ARISEHooks._tau_plus_groups(trainer, batch)
    return group, asked


def test_tau_plus_groups_mark_the_unaided_correct_traces(monkeypatch):
    # one group: 2 control-arm trajectories (one right: R=1), 2 with a skill (one right: R=2)
    texts = ["ctrl_right", "ctrl_wrong", "skill_right", "skill_wrong"]
    rewards = [1.0, 0.0, 2.0, 0.0]
    skills = ["", "", "s000001", "s000001"]
    data = {
        "uid": ["q1"] * 4,
        "responses": _Jagged([_enc(t) for t in texts]),
        "rm_scores": _Jagged([[0.0] * (len(t) - 1) + [r] for t, r in zip(texts, rewards, strict=True)]),
        "raw_prompt": [MESSAGES] * 4,
        "extra_info": [{"question": "What is 1 plus 2?"}] * 4,
        "extra_fields": [{"arise_skill_id": s, "arise_control": not s} for s in skills],
    }
    group, _ = _tau_plus_group(monkeypatch, data)
    # tau+ (R above the group mean 0.75): the R=2 skill trace first, then the R=1 control trace
    assert [(t["text"], t["skill_id"]) for t in group["traces"]] == [("skill_right", "s000001"), ("ctrl_right", "")]
    assert [bytes(t["ids"]).decode() for t in group["unaided"]] == ["ctrl_right"]


def test_an_all_correct_unaided_group_gives_the_exact_ig_its_trace_but_no_summary(monkeypatch):
    """A group without tau+ (all R=1: dynamic sampling off, or a group the batch keeps anyway) still
    holds correct unaided traces: the exact IG takes them, the summary does not see it (no traces)."""
    texts = ["right_a", "right_b", "wrong_c"]
    data = {
        "uid": ["q1", "q1", "q2"],
        "responses": _Jagged([_enc(t) for t in texts]),
        "rm_scores": _Jagged([[0.0] * (len(t) - 1) + [r] for t, r in zip(texts, (1.0, 1.0, 0.0), strict=True)]),
        "raw_prompt": [MESSAGES] * 3,
        "extra_info": [{"question": "What is 1 plus 2?"}] * 3,
        "extra_fields": [{"arise_skill_id": ""}] * 3,
    }
    group, _ = _tau_plus_group(monkeypatch, data)  # q2: nothing correct: no group
    assert group["uid"] == "q1" and group["traces"] == [] and len(group["unaided"]) == 2


def test_exact_ig_scores_the_whole_trace_by_default():
    trainer, cls = _ig_trainer()
    long_trace = _enc("y" * 1500)  # longer than the old 1,024-token clip
    group = {"uid": "g1", "messages": MESSAGES, "traces": [], "unaided": [{"reward": 1.0, "ids": long_trace}]}
    cls._exact_ig(trainer, [group], step=100)
    assert trainer.arise.ig.max_response_tokens == 0
    assert all(bytes(p).decode().endswith("|A:" + "y" * 1500) for p in trainer.prompts[:1])


# --------------------------------------------------------------------------- tau+ traces of a tool loop


def test_tau_plus_traces_of_a_tool_loop_are_transcripts(monkeypatch, tool_trace):
    tool_ids, tool_mask = tool_trace.ids, tool_trace.mask
    plain = [ord(c) for c in "2 plus 2 is 4. \\boxed{4}"]
    data = {
        "uid": ["q1"] * 3,
        "responses": _Jagged([tool_ids, plain, [ord("x")]]),
        "response_mask": _Jagged([tool_mask, [1] * len(plain), [1]]),
        "rm_scores": _Jagged([[0.0] * (len(tool_ids) - 1) + [1.0], [0.0] * (len(plain) - 1) + [1.0], [0.0]]),
        "raw_prompt": [[{"role": "user", "content": "What is 2+2?"}]] * 3,
        "extra_info": [{"question": "What is 2+2?"}] * 3,
        "extra_fields": [{}] * 3,
    }
    group, asked = _tau_plus_group(monkeypatch, data)
    assert "response_mask" in asked[0]
    tool, single = group["traces"]
    assert tool["tool_turns"] == 1 and single["tool_turns"] == 0
    assert f"TOOL CALL python: {tool_trace.code}" in tool["text"] and "TOOL RESULT: 5050" in tool["text"]
    assert "r" * 201 not in tool["text"]  # tool_result_chars, 200 by default
    assert single["text"] == bytes(plain).decode() and tool["ids"] == tool_ids


def test_exact_ig_skips_and_counts_traces_without_prompt_logprobs():
    """A diagnostic must not crash training: an engine answer without ``prompt_logprobs`` (or a failed
    request) drops that trace for every skill, is counted, and the other traces still give the IG."""
    trainer, cls = _ig_trainer()
    full = trainer._generate_all

    def generate_all(prompts, params, timeout_s):
        outs = full(prompts, params, timeout_s)
        for i, p in enumerate(prompts):
            if bytes(p).decode().endswith("|A:bad"):  # the trace of the second group, under every context
                outs[i] = SimpleNamespace(extra_fields={}) if i % 2 else RuntimeError("engine down")
        return outs

    trainer._generate_all = generate_all
    groups = [
        {"uid": u, "messages": MESSAGES, "traces": [], "unaided": [{"reward": 1.0, "ids": _enc(t)}]}
        for u, t in (("g1", "good"), ("g2", "bad"))
    ]
    ig, skipped = cls._exact_ig(trainer, groups, step=100)
    assert skipped == 1
    assert set(ig) == set(trainer.library.cache_ids()) and all(v == v for v in ig.values())
    # every trace without log-probs: nothing measured, nothing raised
    trainer._generate_all = lambda prompts, params, timeout_s: [SimpleNamespace(extra_fields={}) for _ in prompts]
    assert cls._exact_ig(trainer, groups, step=200) == ({}, 2)


# --------------------------------------------------------------------------- the batch-field reader


def test_the_trainer_reads_a_batchs_fields_through_one_reader_that_skips_padding(monkeypatch):
    """_extra_fields and _skill_tokens_in_loss (like _tau_plus_groups) read the transfer queue through
    trainer_upload.batch_fields: the keys of the rows that are not padding, the batch's partition."""
    import recipe.arise.adapters.trainer as trainer_mod
    import recipe.arise.adapters.trainer_upload as upload_mod

    calls = []
    extra = [{"arise_skill_in_response": True, "arise_skill_tokens": 2}, {"arise_skill_tokens": 3}]

    def kv_batch_get(keys, partition_id, select_fields):
        calls.append((keys, partition_id, select_fields))
        return {"extra_fields": extra, "response_mask": _Jagged([[1, 0, 1, 1], [1, 1, 1]])}

    monkeypatch.setattr(upload_mod.tq, "kv_batch_get", kv_batch_get)
    batch = SimpleNamespace(keys=["a", "pad", "b"], tags=[{}, {"is_padding": True}, {}], partition_id="train")
    cls, host = trainer_mod.ARISEHooks, SimpleNamespace()
    assert cls._extra_fields(host, batch) == extra
    # row 0: its skill line is 2 tokens, masked 1 and 0; row 1 has no skill line in its response
    assert cls._skill_tokens_in_loss(host, batch) == 1.0
    fields = [["extra_fields"], ["response_mask", "extra_fields"]]
    assert calls == [(["a", "b"], "train", f) for f in fields]
    padding = SimpleNamespace(keys=["p"], tags=[{"is_padding": True}], partition_id="train")
    assert upload_mod.batch_fields(padding, ["uid"]) is None
    assert cls._extra_fields(host, padding) == [] and cls._skill_tokens_in_loss(host, padding) == 0.0
    assert cls._tau_plus_groups(host, padding) == [] and len(calls) == 2  # nothing asked of the store


def test_tau_plus_traces_of_an_environment_episode_are_its_transcript(monkeypatch):
    """arise_env_agent's episodes: the summary reads the episode's OBSERVATION / ACTION transcript
    (core.transcript.env_transcript), marked env, not the tokens' ASSISTANT / TOOL RESULT rendering."""
    transcript = "OBSERVATION: A room. " + "A key is here. " * 30 + "\nACTION: take key\nOBSERVATION: You won!"
    won = {"won": True, "turns": 1, "invalid_actions": 0, "failed": None, "transcript": transcript}
    lost = {**won, "won": False, "transcript": "OBSERVATION: A room.\nACTION: look\nOBSERVATION: A room."}
    ids = [ord(c) for c in "Action: take key"] + [ord(c) for c in "U:You won!"] + [ord("x")]
    mask = [1] * 16 + [0] * 10 + [1]
    data = {
        "uid": ["q1"] * 2,
        "responses": _Jagged([ids, ids]),
        "response_mask": _Jagged([mask, mask]),
        "rm_scores": _Jagged([[0.0] * (len(ids) - 1) + [1.0], [0.0] * len(ids)]),
        "raw_prompt": [[{"role": "user", "content": "Take the key."}]] * 2,
        "extra_info": [{"question": "Take the key."}] * 2,
        "extra_fields": [{"env": won}, {"env": lost}],
    }
    group, _ = _tau_plus_group(monkeypatch, data)
    (trace,) = group["traces"]
    assert trace["env"] is True and trace["tool_turns"] == 1
    lines = trace["text"].split("\n")
    assert lines[0].startswith("OBSERVATION: A room.") and len(lines[0]) == len("OBSERVATION: ") + 200
    assert lines[1:] == ["ACTION: take key", "OBSERVATION: You won!"]
