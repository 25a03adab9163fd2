"""The causal uplift is the mean of each query group's own difference (not pooled counts), and the
exact IG is measured on unaided traces in the context the skill is injected in."""

import itertools
import logging
import math
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipe.arise.core.groups import group_contrasts, mechanism_metrics
from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_entry import Contrast
from recipe.arise.core.library_store import _arrow_schema
from recipe.arise.core.reward import hierarchical_reward
from recipe.arise.core.skill import SkillDoc
from recipe.arise.tools.inspect_run import library_rows, select_rows


def _obs(uid, skill, correct, control=False):
    reward = hierarchical_reward(correct, bool(skill), 2)
    return {"uid": uid, "skill_id": skill, "correct": correct, "control": control, "phase": 2, "reward": reward}


def _simpson_observations(easy="s000001", hard_greedy="s000002"):
    """Skill ``easy`` is the greedy pick on an easy query (everything right, with or without it) and
    an epsilon pick on a hard one (everything wrong): in each group its uplift is exactly 0."""
    obs = [_obs("easy", "", True, control=True) for _ in range(2)]
    obs += [_obs("easy", easy, True) for _ in range(6)]
    obs += [_obs("hard", "", False, control=True) for _ in range(2)]
    obs += [_obs("hard", hard_greedy, False) for _ in range(5)]
    obs += [_obs("hard", easy, False)]  # the epsilon-explored trajectory
    return obs


def _library(*names):
    return SkillLibrary(seed_skills=[SkillDoc(n, "general", f"insight {n}", ("a", "b"), "c") for n in names])


def test_simpsons_paradox_gives_no_uplift():
    lib = _library("easy_skill", "hard_skill")
    easy, hard = lib.cache_ids()
    lib.step([], [], 1, contrasts=group_contrasts(_simpson_observations(easy, hard)))
    e = lib.get(easy)
    # pooled counts would say 6/7 - 2/4 = +0.357; every group's own uplift is 0
    assert e.pooled_uplift == pytest.approx(6 / 7 - 2 / 4)
    assert e.uplift == pytest.approx(0.0) and e.uplift_groups == 2
    assert lib.get(hard).uplift == pytest.approx(0.0)
    # ranking by uplift (inspect, rank_by: uplift) is not fooled either
    assert [r["uplift"] for r in select_rows(library_rows(lib), sort="uplift")] == [pytest.approx(0.0)] * 2


def test_step_uplift_metric_is_stratified_too():
    obs = [_obs("easy", "", True, control=True) for _ in range(2)] + [_obs("easy", "s1", True) for _ in range(6)]
    obs += [_obs("hard", "", False, control=True) for _ in range(2)] + [_obs("hard", "s1", False)]
    obs += [_obs("hard", "", False) for _ in range(5)]  # unaided but not control (e.g. skill_overlong)
    assert mechanism_metrics(obs)["step_uplift"] == pytest.approx(0.0)  # pooled: 6/7 - 2/4


def test_estimator_weights_and_standard_error():
    lib = _library("a_skill")
    sid = lib.cache_ids()[0]
    contrasts = [Contrast(sid, 6, 6, 2, 1), Contrast(sid, 1, 0, 2, 1)]  # d = +0.5 (w 1.5), -0.5 (w 2/3)
    ev = lib.step([], [], 1, contrasts=[*contrasts, Contrast(sid, 0, 0, 2, 1), Contrast("nope", 1, 1, 1, 1)])
    assert ev.contrasts == 2  # an empty arm measures nothing; unknown skills are skipped
    e = lib.get(sid)
    w = [6 * 2 / 8, 1 * 2 / 3]
    assert e.uplift == pytest.approx((w[0] * 0.5 - w[1] * 0.5) / sum(w))
    var = [0.25 / 2, 0.25 / 2]  # p1 = 1 or 0 contributes 0; the control arm p0 = 0.5 of 2
    assert e.uplift_se == pytest.approx(math.sqrt(w[0] ** 2 * var[0] + w[1] ** 2 * var[1]) / sum(w))
    assert (e.uplift_n, e.uplift_successes, e.uplift_base_n, e.uplift_base_successes) == (7, 6, 4, 2)
    # one group alone: the plain difference of its rates
    one = _library("b_skill")
    one.step([], [], 1, contrasts=[Contrast(one.cache_ids()[0], 4, 3, 2, 1)])
    assert one.get(one.cache_ids()[0]).uplift == pytest.approx(0.25)


def test_the_sums_survive_save_and_load(tmp_path):
    lib = _library("easy_skill", "hard_skill")
    lib.step([], [], 1, contrasts=[Contrast(lib.cache_ids()[0], 6, 5, 2, 1), Contrast(lib.cache_ids()[0], 2, 1, 2, 0)])
    lib.save(tmp_path / "lib.parquet")
    back = SkillLibrary.load(tmp_path / "lib.parquet")
    assert back == lib
    a, b = back.get(lib.cache_ids()[0]), lib.get(lib.cache_ids()[0])
    assert (a.uplift, a.uplift_se, a.uplift_groups) == (b.uplift, b.uplift_se, 2)


def _write_old_version(lib, path, version, columns):
    table = pa.Table.from_pylist(lib.to_records(), schema=_arrow_schema())
    table = table.select(list(range(columns)))
    config = {**lib.state_dict()["config"], "format_version": version}
    if version == 1:
        config.pop("seed_trial_uses")
        config.pop("rank_by")
    import json

    pq.write_table(table.replace_schema_metadata({b"arise_skill_library": json.dumps(config).encode()}), path)


def test_version_2_files_load_with_the_uplift_restarted(tmp_path, caplog):
    lib = _library("easy_skill", "hard_skill")
    easy, hard = lib.cache_ids()
    lib.step([(easy, 2.0)], [], 1, contrasts=group_contrasts(_simpson_observations(easy, hard)))
    _write_old_version(lib, tmp_path / "v2.parquet", 2, 25)
    with caplog.at_level(logging.WARNING, logger="recipe.arise.core.library_store"):
        back = SkillLibrary.load(tmp_path / "v2.parquet")
    e = back.get(easy)
    assert e.uplift is None and e.uplift_groups == 0  # unmeasured: pooled counts cannot be split by group
    assert (e.uplift_n, e.uplift_successes) == (7, 6) and e.utility == lib.get(easy).utility
    assert "version-2" in caplog.text and "restarts unmeasured" in caplog.text
    # it keeps measuring from there, and saves as the current version
    back.step([], [], 2, contrasts=[Contrast(easy, 2, 2, 2, 1)])
    assert back.get(easy).uplift == pytest.approx(0.5)
    back.save(tmp_path / "v3.parquet")
    assert SkillLibrary.load(tmp_path / "v3.parquet") == back


def test_version_1_files_still_load(tmp_path):
    lib = _library("a_skill", "b_skill")
    lib.step([(lib.cache_ids()[0], 1.0)], [], 1)
    _write_old_version(lib, tmp_path / "v1.parquet", 1, 14)
    back = SkillLibrary.load(tmp_path / "v1.parquet")
    assert [e.skill_id for e in back.cache] == lib.cache_ids() and back.get(lib.cache_ids()[0]).usage_count == 1
    assert all(e.origin == "seed" for e in back.cache)


def test_bad_uplift_sums_are_rejected(tmp_path):
    from recipe.arise.core.library_store import LibraryFormatError

    lib = _library("a_skill")
    rows = lib.to_records()
    rows[0]["uplift_groups"] = 2  # groups without weight
    with pytest.raises(LibraryFormatError, match="row 0: fields 'uplift_groups'"):
        SkillLibrary.from_records(rows, lib.state_dict()["config"])
    rows[0].update(uplift_groups=1, uplift_weight=1.0, uplift_wvar=float("nan"))
    with pytest.raises(LibraryFormatError, match="row 0: field 'uplift_wvar'"):
        SkillLibrary.from_records(rows, lib.state_dict()["config"])


# ------------------------------------------------------------------ exact IG (trainer adapter)


class _ByteTokenizer:
    """Characters as tokens; the chat template is 'U:' + content + '|A:'."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
        return self.encode("".join(f"U:{m['content']}" for m in messages) + "|A:")


MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]


def _ig_trainer(train_manager=False):
    pytest.importorskip("verl")
    from recipe.arise.adapters.trainer import ARISETrainer
    from recipe.arise.core.arise_config import ARISEConfig

    cfg = ARISEConfig.from_dict({"selection": {"train_manager": train_manager}, "ig": {"max_traces": 4}})
    lib = _library("skill_a", "skill_b")
    trainer = SimpleNamespace(
        arise=cfg, tokenizer=_ByteTokenizer(), config=SimpleNamespace(data={}), library=lib, prompts=[]
    )
    trainer._chat_ids = ARISETrainer._chat_ids.__get__(trainer)
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
    ig = cls._exact_ig(trainer, [group], step=100)
    assert set(ig) == set(trainer.library.cache_ids())
    traces = {bytes(p).decode().rsplit("|A:", 1)[1] for p in trainer.prompts}
    assert traces == {"plain"}
    # no unaided trace at all: nothing is measured (never a skill-written trace)
    trainer.prompts.clear()
    group_without = {**group, "unaided": []}
    assert cls._exact_ig(trainer, [group_without], step=200) == {} and trainer.prompts == []


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


def test_tau_plus_groups_mark_the_unaided_correct_traces(monkeypatch):
    pytest.importorskip("verl")
    import recipe.arise.adapters.trainer as trainer_mod
    from recipe.arise.core.arise_config import ARISEConfig

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
    monkeypatch.setattr(trainer_mod.tq, "kv_batch_get", lambda **kw: dict(data))
    tokenizer = _ByteTokenizer()
    tokenizer.pad_token_id = 0
    tokenizer.decode = lambda ids, skip_special_tokens=True: "".join(chr(i) for i in ids)
    trainer = SimpleNamespace(arise=ARISEConfig(), tokenizer=tokenizer)
    batch = SimpleNamespace(tags=[{}] * 4, keys=list("abcd"), partition_id="train")
    (group,) = trainer_mod.ARISETrainer._tau_plus_groups(trainer, batch)
    # tau+ (R above the group mean 0.75): the R=2 skill trace first, then the R=1 control trace
    assert [(t["text"], t["skill_id"]) for t in group["traces"]] == [("skill_right", "s000001"), ("ctrl_right", "")]
    assert [bytes(t["ids"]).decode() for t in group["unaided"]] == ["ctrl_right"]
