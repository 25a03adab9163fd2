"""The verl adapters' own logic, with verl's servers and Ray replaced by stubs (one piece each).

Review bugs pinned here: the scoring cost goes to the trajectory that ran it; a NaN score or an
engine error sends the group unaided instead of raising; an injected skill never pushes a prompt
past ``rollout.prompt_length``; the summary prompt gets ``max_traces`` traces and the chat-template
kwargs; library maintenance runs once per global step even with ``parameter_sync_step > 1``.
"""

import asyncio
import logging
import math
from types import SimpleNamespace

import pytest
from byte_tokenizer import ByteTokenizer
from omegaconf import OmegaConf
from skill_layer_host import skill_layer

import recipe.arise.adapters.skill_layer as skill_layer_module  # noqa: E402
from recipe.arise.adapters.rollout_failures import FailureTally  # noqa: E402
from recipe.arise.adapters.skill_layer import SkillLayer  # noqa: E402
from recipe.arise.adapters.trainer_metrics import StepState, SummaryCounts  # noqa: E402
from recipe.arise.adapters.trainers import ARISETrainer  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.skill import load_seed_skills  # noqa: E402
from recipe.arise.core.trajectory import TrajectoryInfo  # noqa: E402

SEEDS = load_seed_skills()
CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(SEEDS, start=1)]
MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]


class FakeServer:
    """prompt_logprobs in verl's layout; ``lp(ids)`` gives each token's log-prob."""

    def __init__(self, lp=lambda i, tok: -1.0, fail=False):
        self.lp, self.fail, self.calls = lp, fail, 0

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.calls += 1
        if self.fail:
            raise RuntimeError("engine died")
        logprobs = [[self.lp(j + 1, prompt_ids[j + 1])] for j in range(len(prompt_ids) - 1)] + [[0.0]]
        return SimpleNamespace(token_ids=[0], extra_fields={"prompt_logprobs": logprobs})


def run_group(loop, cfg, uid, n=4, snapshot=None, validate=False):
    snapshot = snapshot or {"version": 1, "cache": CACHE, "mode": "val" if validate else "train"}

    async def all_sessions():
        infos = [TrajectoryInfo(phase=2, validate=validate) for _ in range(n)]
        kwargs = [{"uid": uid, "session_id": s, "global_steps": 9} for s in range(n)]
        chosen = await asyncio.gather(
            *[loop.select(cfg, snapshot, MESSAGES, kwargs[s], validate, infos[s]) for s in range(n)]
        )
        return chosen, infos

    return asyncio.run(all_sessions())


def test_scoring_cost_is_counted_once_on_the_trajectory_that_ran_it():
    server = FakeServer()
    loop = skill_layer(server)
    chosen, infos = run_group(loop, ARISEConfig(), uid="attribution")
    assert infos[0].control and infos[0].scoring_s == 0.0  # session 0: control arm
    scorers = [i for i in infos if i.scorer]
    assert len(scorers) == 1 and scorers[0].scoring_tokens > 0
    assert sum(i.scoring_tokens for i in infos) == scorers[0].scoring_tokens
    assert server.calls == len(CACHE)  # one scoring pass for the whole group


def test_nan_scores_go_unaided_not_raise():
    def lp(pos, tok):
        return math.nan

    chosen, infos = run_group(skill_layer(FakeServer(lp)), ARISEConfig(), uid="nan")
    assert chosen == [None] * 4
    assert all(i.scoring_failed for i in infos if not i.control)

    # one skill's numbers unusable: that skill cannot be chosen, the others still can
    bad = CACHE[2][1]

    class PartlyBroken(FakeServer):
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            out = await super().generate(request_id, prompt_ids, sampling_params)
            if bytes(prompt_ids[-len(bad) :]).decode() == bad:
                out.extra_fields["prompt_logprobs"][-2] = [math.nan]
            return out

    cfg = ARISEConfig.from_dict({"selection": {"max_skill_tokens": 1000}})  # whole skill: byte tokens
    chosen, infos = run_group(skill_layer(PartlyBroken()), cfg, uid="partial")
    scored = [i for i in infos if not i.control]
    assert all(i.scores_nonfinite == 1 and not i.scoring_failed for i in scored)
    assert all(c is None or c.skill_id != CACHE[2][0] for c in chosen)


def test_engine_error_sends_the_group_unaided():
    chosen, infos = run_group(skill_layer(FakeServer(fail=True)), ARISEConfig(), uid="error")
    assert chosen == [None] * 4
    assert [i.scoring_failed for i in infos] == [False, True, True, True]  # session 0: control


def test_scoring_timeout_sends_the_group_unaided():
    class Slow(FakeServer):
        async def generate(self, *args, **kwargs):
            await asyncio.sleep(5)

    cfg = ARISEConfig.from_dict({"selection": {"scoring_timeout_s": 0.05}})
    chosen, infos = run_group(skill_layer(Slow()), cfg, uid="slow")
    assert chosen == [None] * 4 and infos[1].scoring_failed


def test_a_skill_that_stands_out_is_selected_under_mean_scores():
    favourite = CACHE[3][1]

    class Prefers(FakeServer):
        async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
            out = await super().generate(request_id, prompt_ids, sampling_params)
            if bytes(prompt_ids[-len(favourite) :]).decode() == favourite:
                out.extra_fields["prompt_logprobs"] = [[-0.1] for _ in out.extra_fields["prompt_logprobs"]]
            return out

    cfg = ARISEConfig.from_dict({"selection": {"epsilon": 0.0, "max_skill_tokens": 1000}})
    chosen, infos = run_group(skill_layer(Prefers()), cfg, uid="prefers")
    assert chosen[0] is None and all(c.skill_id == CACHE[3][0] for c in chosen[1:])
    assert all(i.gate_passed and i.max_prob > 0.35 for i in infos[1:])
    # the same numbers under sum scores: still selected (the sum only sharpens p)
    cfg = ARISEConfig.from_dict({"selection": {"epsilon": 0.0, "score_norm": "sum", "max_skill_tokens": 1000}})
    assert run_group(skill_layer(Prefers()), cfg, uid="prefers-sum")[0][1][0] == CACHE[3][0]


def test_flat_scores_are_rejected_by_the_gate():
    chosen, infos = run_group(skill_layer(FakeServer()), ARISEConfig(), uid="flat")
    assert chosen == [None] * 4
    assert all(i.gate_passed is False for i in infos[1:])  # p = 0.2 each < delta


def test_injected_prompt_must_fit_the_prompt_length():
    class Builder:
        def build_initial_tokens(self, messages, tools=None):
            return [0] * sum(len(m["content"]) for m in messages)

    loop = SimpleNamespace(
        continuous_token_builder=Builder(),
        tokenizer=None,
        rollout_config=SimpleNamespace(prompt_length=100),
        loop=asyncio.new_event_loop(),
    )
    fits = SkillLayer(loop).fits
    assert loop.loop.run_until_complete(fits([{"role": "user", "content": "x" * 100}]))
    assert not loop.loop.run_until_complete(fits([{"role": "user", "content": "x" * 101}]))
    loop.loop.close()


class Recording(FakeServer):
    """Records which skills were scored; every skill scores -1 per token except ``favourite``."""

    def __init__(self, favourite=None):
        super().__init__()
        self.favourite, self.scored = favourite, []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        out = await super().generate(request_id, prompt_ids, sampling_params)
        text = bytes(prompt_ids).decode()
        self.scored += [skill_id for skill_id, doc in CACHE if text.endswith(doc)]
        if self.favourite is not None and text.endswith(self.favourite):
            out.extra_fields["prompt_logprobs"] = [[-0.1] for _ in out.extra_fields["prompt_logprobs"]]
        return out


def test_score_top_m_scores_only_the_m_skills_of_highest_utility():
    utilities = [0.1, 0.9, -0.5, 0.4, 0.0]  # top 2: s000002 (0.9), s000004 (0.4)
    snapshot = {"version": 1, "cache": CACHE, "utilities": utilities, "mode": "train"}
    cfg = ARISEConfig.from_dict({"selection": {"score_top_m": 2, "epsilon": 0.0, "max_skill_tokens": 1000}})
    server = Recording(favourite=CACHE[3][1])
    chosen, infos = run_group(skill_layer(server), cfg, uid="top-m", snapshot=snapshot)
    assert sorted(server.scored) == ["s000002", "s000004"] and server.calls == 2  # once per group
    assert all(len(i.scores) == 2 for i in infos[1:])
    assert all(c.skill_id == "s000004" for c in chosen[1:])  # the candidate index maps back to the cache

    # a skill outside the top M is never a candidate, however well it would score
    server = Recording(favourite=CACHE[0][1])
    chosen, infos = run_group(skill_layer(server), cfg, uid="top-m-excluded", snapshot=snapshot)
    assert "s000001" not in server.scored and all(c is None or c.skill_id != "s000001" for c in chosen)


def test_score_top_m_zero_or_at_least_the_cache_scores_every_skill():
    snapshot = {"version": 1, "cache": CACHE, "utilities": [0.0] * len(CACHE), "mode": "train"}
    for m in (0, len(CACHE), len(CACHE) + 3):
        server = Recording()
        cfg = ARISEConfig.from_dict({"selection": {"score_top_m": m, "max_skill_tokens": 1000}})
        run_group(skill_layer(server), cfg, uid=f"all-{m}", snapshot=snapshot)
        assert sorted(server.scored) == [skill_id for skill_id, _ in CACHE]


def test_score_top_m_without_published_utilities_takes_the_cache_order():
    server = Recording()
    cfg = ARISEConfig.from_dict({"selection": {"score_top_m": 3, "max_skill_tokens": 1000}})
    run_group(skill_layer(server), cfg, uid="no-utilities")  # snapshot without "utilities"
    assert sorted(server.scored) == [skill_id for skill_id, _ in CACHE[:3]]


class PrefixCachingServer(FakeServer):
    """vLLM's prefix cache as the scoring requests meet it: blocks of ``block`` tokens, keyed by
    their whole prefix, written by every request, read by a request unless it skips reading
    (``skip_reading_prefix_cache``, vLLM's default for ``prompt_logprobs``); at least the last
    prompt token is computed. Prompt log-probs are filled only for computed positions: a cached
    row holds garbage (vLLM's uninitialised buffer), as in ``_get_prompt_logprobs_dict``."""

    GARBAGE = 1.0e26

    def __init__(self, block=7, report=True):
        super().__init__(lp=lambda pos, tok: -0.01 * (tok % 7) - 0.001 * pos)
        self.block, self.report, self.blocks, self.log = block, report, set(), []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        out = await super().generate(request_id, prompt_ids, sampling_params)
        reads = sampling_params.get("skip_reading_prefix_cache") is False
        hit = 0
        if reads:
            while hit + self.block <= len(prompt_ids) - 1 and tuple(prompt_ids[: hit + self.block]) in self.blocks:
                hit += self.block
        await asyncio.sleep(0)  # requests sent together are scheduled together: none reads another's blocks
        for end in range(self.block, len(prompt_ids) + 1, self.block):
            self.blocks.add(tuple(prompt_ids[:end]))
        rows = out.extra_fields["prompt_logprobs"]
        for j in range(min(hit, len(rows))):  # row j: log-prob of token j + 1, computed at position j
            rows[j] = [self.GARBAGE]
        out.extra_fields["num_cached_tokens"] = hit if self.report else None
        self.log.append((reads, hit, sampling_params.get("detokenize", True)))
        return out


def caching_loop(server, name="vllm", enabled=True):
    loop = skill_layer(server)
    loop.rollout_config.name, loop.rollout_config.enable_prefix_caching = name, enabled
    return loop


def scores_of(infos):
    return [i.scores for i in infos if i.scorer][0]


NO_CACHE = ARISEConfig.from_dict({"selection": {"scoring_prefix_cache": False, "max_skill_tokens": 1000}})
WITH_CACHE = ARISEConfig.from_dict({"selection": {"max_skill_tokens": 1000}})


def test_scoring_reads_the_query_prefix_from_the_prefix_cache_with_the_same_scores():
    expected = scores_of(run_group(caching_loop(PrefixCachingServer()), NO_CACHE, uid="plain")[1])
    server = PrefixCachingServer()
    chosen, infos = run_group(caching_loop(server), WITH_CACHE, uid="cached")
    assert scores_of(infos) == expected  # not a single garbage row read
    # one request first, as usual (it computes every row and writes its blocks), then the others read
    # them: the query and the JSON head all skills share
    assert server.log[0] == (False, 0, False)  # no scoring request decodes its prompt (detokenize off)
    assert all(reads and hit > 0 and detok is False for reads, hit, detok in server.log[1 : len(CACHE)])
    scorer = [i for i in infos if i.scorer][0]
    assert scorer.scoring_cached_tokens > len(MESSAGES[0]["content"]) * (len(CACHE) - 1)
    assert scorer.scoring_rescored == 0
    plain_infos = run_group(caching_loop(PrefixCachingServer()), NO_CACHE, uid="p3")[1]
    plain_tokens = [i.scoring_tokens for i in plain_infos if i.scorer][0]
    assert scorer.scoring_tokens + scorer.scoring_cached_tokens == plain_tokens
    # the paper's path: every request prefills query + skill, nothing read from the cache
    plain = PrefixCachingServer()
    infos = run_group(caching_loop(plain), NO_CACHE, uid="plain-2")[1]
    assert all(not reads for reads, _, _ in plain.log)
    assert [i for i in infos if i.scorer][0].scoring_cached_tokens == 0


def test_a_cache_hit_into_the_skill_tokens_is_scored_again_without_the_cache():
    # the same query and skills already in the cache (a duplicate question in the batch): the hit
    # covers skill positions whose prompt log-probs vLLM never computed
    server = PrefixCachingServer()
    first = scores_of(run_group(caching_loop(server), WITH_CACHE, uid="q-a")[1])
    chosen, infos = run_group(caching_loop(server), WITH_CACHE, uid="q-b")
    assert scores_of(infos) == first and all(abs(x) < 1e3 for x in first)
    scorer = [i for i in infos if i.scorer][0]
    assert scorer.scoring_rescored == len(CACHE) - 1
    assert [reads for reads, _, _ in server.log[-(len(CACHE) - 1) :]] == [False] * (len(CACHE) - 1)


def test_a_hit_ending_where_the_skills_part_is_scored_again():
    # chat(query) + "\nSKILL:" + '{"skill_name":"' is 44 characters here: with blocks of 4 the cache
    # hit ends exactly where the skills part, and the row of the first differing token (the log-prob
    # of the skill's name) was never computed: nothing to copy it from, so each is scored again
    prefix = len("U:" + MESSAGES[0]["content"] + "|A:" + "\nSKILL:" + '{"skill_name":"')
    assert prefix == 44
    expected = scores_of(run_group(caching_loop(PrefixCachingServer()), NO_CACHE, uid="b-plain")[1])
    infos = run_group(caching_loop(PrefixCachingServer(block=4)), WITH_CACHE, uid="b-aligned")[1]
    assert scores_of(infos) == expected
    assert [i for i in infos if i.scorer][0].scoring_rescored > 0


def test_no_cached_token_count_means_no_trust_in_the_cached_rows():
    expected = scores_of(run_group(caching_loop(PrefixCachingServer()), NO_CACHE, uid="n-plain")[1])
    server = PrefixCachingServer(report=False)
    infos = run_group(caching_loop(server), WITH_CACHE, uid="n-none")[1]
    assert scores_of(infos) == expected
    assert [i for i in infos if i.scorer][0].scoring_rescored == len(CACHE) - 1


@pytest.mark.parametrize("name,enabled", [("sglang", True), ("vllm", False)])
def test_prefix_cache_scoring_only_on_vllm_with_its_prefix_cache(name, enabled):
    server = PrefixCachingServer()
    run_group(caching_loop(server, name, enabled), WITH_CACHE, uid=f"{name}-{enabled}")
    # vLLM is told not to decode the prompt; SGLang gets no vLLM-only key (it rejects unknown ones)
    assert server.log and all(not reads and detok is (name != "vllm") for reads, _, detok in server.log)


def test_pool_publishes_the_cache_utilities_beside_the_cache():
    from recipe.arise.adapters.library_replica import LibraryReplica

    pool = LibraryReplica()
    assert pool.snapshot()["utilities"] is None
    pool.publish(2, CACHE, [0.5, 0, 1, 2, 3])
    assert pool.snapshot()["utilities"] == [0.5, 0.0, 1.0, 2.0, 3.0] and pool.snapshot()["version"] == 2
    pool.publish(3, CACHE)  # a publisher without utilities: none (top-M falls back to cache order)
    assert pool.snapshot()["utilities"] is None
    with pytest.raises(ValueError, match="utilities"):
        pool.publish(4, CACHE, [1.0])


def test_evaluation_samples_of_one_query_share_one_scoring():
    # verl's v1 _validate gives each validation prompt one uid and runs its val_kwargs.n sessions
    # with that uid: the k samples of a query await one scoring
    server = FakeServer()
    k = 6
    loop = skill_layer(server)
    loop.rollout_config.val_kwargs.n = k
    chosen, infos = run_group(loop, ARISEConfig(), uid="val-query", n=k, validate=True)
    assert server.calls == len(CACHE)
    assert sum(i.scorer for i in infos) == 1 and not any(i.control for i in infos)
    # another query (another uid) is scored on its own
    run_group(loop, ARISEConfig(), uid="val-query-2", n=k, validate=True)
    assert server.calls == 2 * len(CACHE)


# ------------------------------------------------------------------ trainer pieces


def make_trainer(arise_cfg, chat_kwargs=None):
    trainer = SimpleNamespace(
        arise=arise_cfg,
        tokenizer=ByteTokenizer(),
        config=SimpleNamespace(data={"apply_chat_template_kwargs": chat_kwargs or {}}),
        prompts=[],
    )

    def generate_all(prompts, params, timeout_s):
        trainer.prompts += prompts
        doc = SEEDS[0].to_json()
        return [SimpleNamespace(token_ids=[ord(c) for c in doc])] + [RuntimeError("x")] * (len(prompts) - 1)

    trainer._generate_all = generate_all
    return trainer


def group(uid, traces):
    return {
        "uid": uid,
        "question": "What is 1 plus 2?",
        "messages": MESSAGES,
        "success_rate": 0.5,
        "traces": [{"text": t, "reward": 1.0, "ids": []} for t in traces],
    }


def test_summary_prompt_gets_max_traces_and_the_chat_kwargs():
    cfg = ARISEConfig.from_dict({"summary": {"max_traces": 3}})
    trainer = make_trainer(cfg, chat_kwargs={"enable_thinking": False})
    new, stats = ARISETrainer._summary_rollouts(trainer, [group("g1", ["t1", "t2", "t3", "t4"]), group("g2", ["a"])], 5)
    prompt = bytes(trainer.prompts[0]).decode()
    assert "[SUCCESS #3] t3" in prompt and "[SUCCESS #4]" not in prompt
    assert trainer.tokenizer.chat_kwargs[0] == {"enable_thinking": False}
    # g2's request failed: counted, and no trace_abstract skill (App. D.1's fallback is for invalid JSON)
    assert stats["parsed"] == 1 and stats["failed"] == 1 and stats["fallback"] == 0
    ((doc, prov),) = new
    assert prov.origin == "json" and prov.step == 5 and prov.uid == "g1" and prov.rewards == (1.0, 1.0, 1.0)


def test_a_reply_that_is_not_json_falls_back_and_a_failed_request_yields_nothing():
    from recipe.arise.core.summary import summary_skills

    cfg = ARISEConfig.from_dict({}).summary
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: bytes(ids).decode())
    groups = [group("g1", ["t1"]), group("g2", ["t2"]), group("g3", ["t3"])]
    outputs = [list(b"no json here"), asyncio.TimeoutError(), None]
    new, stats = summary_skills(tok, groups, outputs, 0, cfg, 3, logging.getLogger("test"))
    assert (stats["parsed"], stats["fallback"], stats["failed"]) == (0, 1, 2)
    assert [(p.uid, p.origin, d.skill_name) for d, p in new] == [("g1", "fallback", "trace_abstract")]


def test_a_parsed_but_overlong_summary_is_discarded_not_a_fallback(caplog):
    """App. D.1: a document over 220 chars after clipping is discarded; the trace_abstract fallback is
    for a reply that is not valid JSON. The drop is counted (arise/summary_discarded) and printed."""
    from recipe.arise.core.summary import summary_skills

    long_json = (
        '{"skill_name":"long_skill","problem_type":"algebra","key_insight":"' + "k" * 150 + '",'
        '"method":["' + "a" * 90 + '","' + "b" * 90 + '"],"check":"Plug in"}'
    )
    cfg = ARISEConfig.from_dict({"summary": {"on_overlong": "discard"}}).summary  # as PRESET=paper sets it
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: bytes(ids).decode())
    groups = [group("g1", ["t1"]), group("g2", ["t2"])]
    with caplog.at_level(logging.WARNING):
        new, stats = summary_skills(
            tok, groups, [list(long_json.encode()), list(b"no json")], 0, cfg, 3, logging.getLogger("t")
        )
    assert (stats["parsed"], stats["fallback"], stats["discarded"]) == (0, 1, 1)
    assert [(p.uid, p.origin) for _, p in new] == [("g2", "fallback")]  # g1 yields no skill
    assert "g1 discarded (arise/summary_discarded)" in caplog.text
    counts = SummaryCounts()
    counts.add(stats)
    assert counts.discarded == 1
    # the default shrinks the same document to fit instead
    new, stats = summary_skills(
        tok, groups[:1], [list(long_json.encode())], 0, ARISEConfig.from_dict({}).summary, 3, logging.getLogger("t")
    )
    assert (stats["parsed"], stats["discarded"]) == (1, 0) and new[0][1].origin == "json"


def test_library_maintenance_runs_once_per_global_step():
    calls = []

    class Stub(ARISETrainer):
        def __init__(self):  # no verl set-up: only what on_sample_end touches
            self.library = object()
            self.arise, self.global_steps, self.library_replica = ARISEConfig(), 1, None
            self.replay_buffer = SimpleNamespace(
                last_train_batch=None, failures={"train": FailureTally()}, refilled_step=0
            )
            self._step_state, self._arise_version = StepState(), 1
            self.parameter_sync_step = 2
            self.local_trigger_step = 0
            self.checkpoint_manager = SimpleNamespace(sleep_replicas=lambda: calls.append("sleep"))
            self.curr_step_profile = False

        def _arise_sample(self, batch):
            calls.append("sample")

        def _arise_maintain(self):
            calls.append("maintain")

    trainer = Stub()
    for trigger in (0, 1):
        trainer.local_trigger_step = trigger
        ARISETrainer.on_sample_end(trainer)
    assert calls == ["sample", "sleep", "sample", "maintain", "sleep"]
    # the summary rollouts run before the replicas sleep, on every sampled batch

    # and _arise_maintain itself refuses a second run in the same global step
    ran = []
    trainer2 = SimpleNamespace(global_steps=3, _maintained_step=3, _step_state=None)
    trainer2.library_replica = SimpleNamespace(drain=SimpleNamespace(remote=lambda: ran.append(1)))
    ARISETrainer._arise_maintain(trainer2)
    assert ran == []


def test_step_state_is_fresh():
    a, b = StepState(), StepState()
    a.new_skills.append(1)
    a.summary.add({"attempts": 2, "parsed": 1})
    a.ig["s1"] = 0.5
    assert b.new_skills == [] and b.summary == SummaryCounts() and b.ig == {}
    assert (a.summary.attempts, a.summary.parsed, a.summary.failed) == (2, 1, 0)
    with pytest.raises(ValueError, match="unknown count 'parse'"):  # a misspelt count is not dropped
        a.summary.add({"parse": 1})


class StreamedPool:
    """The pool's stream as the trainer sees it: ``arrivals`` lists what each collect hands over."""

    def __init__(self, claimed, arrivals):
        self.claimed, self.arrivals, self.ended, self.collects = claimed, list(arrivals), False, 0

        def collect():
            self.collects += 1
            return self.claimed, (self.arrivals.pop(0) if self.arrivals else [])

        def end():
            self.ended = True

        self.stream_collect = SimpleNamespace(remote=collect)
        self.stream_end = SimpleNamespace(remote=end)


def streamed_trainer(monkeypatch, pool, timeout_s=600.0):
    import recipe.arise.adapters.trainer_upload as upload_module

    monkeypatch.setattr(upload_module, "ray", SimpleNamespace(get=lambda ref: ref))
    cfg = ARISEConfig.from_dict({"summary": {"stream": True, "choose": "first", "timeout_s": timeout_s}})
    trainer = make_trainer(cfg)
    trainer.library_replica, trainer._step_state = pool, StepState()
    return trainer


def test_the_trainer_waits_for_streamed_summaries_still_running(monkeypatch):
    doc = SEEDS[0].to_json()
    done = {"group": group("g1", ["t1"]), "token_ids": [ord(c) for c in doc], "error": None, "prompt_tokens": 7}
    failed = {"group": group("g2", ["t2"]), "token_ids": None, "error": "RuntimeError('x')", "prompt_tokens": 5}
    pool = StreamedPool(2, [[done], [], [failed]])  # the second summary comes back two polls later
    trainer = streamed_trainer(monkeypatch, pool)
    new, stats = ARISETrainer._streamed_summaries(trainer, step=4)
    assert pool.collects == 3 and pool.ended
    assert stats["attempts"] == 2 and stats["parsed"] == 1 and stats["failed"] == 1 and stats["fallback"] == 0
    assert stats["prompt_tokens"] == 12 and stats["response_tokens"] == len(doc)
    assert [prov.uid for _, prov in new] == ["g1"] and new[0][1].origin == "json" and new[0][1].step == 4
    assert trainer._step_state.summary_streamed == 2


def test_a_streamed_summary_not_back_by_the_deadline_counts_as_failed(monkeypatch):
    pool = StreamedPool(1, [])
    trainer = streamed_trainer(monkeypatch, pool, timeout_s=0.05)
    new, stats = ARISETrainer._streamed_summaries(trainer, step=4)
    assert new == [] and stats["attempts"] == 1 and stats["failed"] == 1 and pool.ended


def test_a_later_config_reusing_a_freed_id_is_not_served_the_old_arise_config(monkeypatch):
    """The agent loop parses the ARISE section once per config object, keyed by id(); CPython
    reuses a freed object's id, which once served a test's train_manager=false loop the parsed
    config of an earlier train_manager=true one."""
    agent_loop_module = skill_layer_module
    monkeypatch.setattr(agent_loop_module, "_CONFIGS", {})
    on_section = {"selection": {"train_manager": True}}
    off_section = {"selection": {"train_manager": False}}
    for _ in range(50):
        # only the outer dict is new each time: a freed one's memory (and id) goes to the next
        on = {"arise": on_section}
        assert agent_loop_module.arise_config(on).selection.train_manager is True
        del on
        off = {"arise": off_section}
        assert agent_loop_module.arise_config(off).selection.train_manager is False
        del off


def test_the_replay_buffer_polls_at_arise_replay_poll_s(monkeypatch):
    """verl's ReplayBuffer looks for finished rollouts every 2 s (no config key): the trainer sets
    its poll interval from arise.replay_poll_s, with ARISE disabled too (the GRPO baseline)."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    built = SimpleNamespace(poll_interval=2.0, sample=lambda **kw: (None, {}))
    monkeypatch.setattr(PPOTrainerSync, "_build_replay_buffer", lambda self: built, raising=False)
    for enable in (True, False):
        trainer = object.__new__(ARISETrainer)
        trainer.arise = ARISEConfig.from_dict({"enable": enable, "replay_poll_s": 0.25})
        trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 2, "val_kwargs": {"n": 1}}}})
        sampler = ARISETrainer._build_replay_buffer(trainer)
        assert sampler.poll_interval == 0.25 and built.poll_interval == 0.25
        built.poll_interval = 2.0
    assert ARISEConfig().replay_poll_s == 0.2
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="replay_poll_s"):
            ARISEConfig.from_dict({"replay_poll_s": bad})
