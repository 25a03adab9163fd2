"""``arise.selection.train_manager``: the Manager trained end to end (docs/design.md, Training the Manager).

With the option on, the selected skill opens the assistant turn in exactly the tokens it was
scored with, and those tokens are policy tokens of the response (mask 1), so verl's policy
gradient reaches log pi(skill | query), the score the Manager selects by. Checked here on the real
agent loop (verl's servers and the skill pool stubbed; the "engine" is a tiny Qwen3 forward pass),
on verl's own log-prob path, and with one GRPO update through verl's loss.
"""

import asyncio
import json
import math
from types import SimpleNamespace

import pytest
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop  # noqa: E402
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder  # noqa: E402

import recipe.arise.adapters.skill_layer as skill_layer_module  # noqa: E402
from recipe.arise.adapters.agent_loop import ARISEAgentLoop  # noqa: E402
from recipe.arise.core.arise_config import ARISEConfig  # noqa: E402
from recipe.arise.core.prompts import inject_skill  # noqa: E402
from recipe.arise.core.scoring import (  # noqa: E402
    MANAGER_SCORING_SUFFIX,
    SCORING_SUFFIX,
    scoring_prefix_ids,
    skill_score,
    skill_token_logprobs,
)
from recipe.arise.core.skill import SkillDoc  # noqa: E402

QUESTION = "What is 1 plus 2? Put the final answer within \\boxed{}."
MESSAGES = [{"role": "user", "content": QUESTION}]
SOLUTION = "1 plus 2 is 3. The answer is \\boxed{3}."
SKILLS = [
    SkillDoc.from_dict(
        {
            "skill_name": "count_up",
            "problem_type": "algebra",
            "key_insight": "Adding b to a is counting up b steps from a",
            "method": ["Start from the larger number", "Count up by the smaller one"],
            "check": "Substitute back to verify",
        }
    ),
    SkillDoc.from_dict(
        {
            "skill_name": "make_ten",
            "problem_type": "number_theory",
            "key_insight": "Split a number to complete a ten, then add the rest",
            "method": ["Find what completes ten", "Add the remainder"],
            "check": "Subtract to verify",
        }
    ),
    SkillDoc.from_dict(
        {
            "skill_name": "boxed_trap",
            "problem_type": "general",
            "key_insight": "A skill may mention \\boxed{99} without being the answer",
            "method": ["Read the question", "Answer it"],
            "check": "Verify",
        }
    ),
]
CACHE = [(f"s{i:06d}", doc.to_json()) for i, doc in enumerate(SKILLS, start=1)]


# --------------------------------------------------------------------------- tiny model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen3 and its BPE tokenizer (recipe.arise.cpu.tiny), random weights: seconds."""
    from recipe.arise.cpu.tiny import all_problems, build_model, build_tokenizer, question, solution

    corpus = [question(a, b, s) + " " + solution(a, b) for a, b, s in all_problems()]
    corpus += [inject_skill(MESSAGES, doc)[0]["content"] for doc in SKILLS] * 5
    torch.manual_seed(0)
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"), corpus)
    model = build_model(tokenizer, seed=0).float().eval()
    return SimpleNamespace(tokenizer=tokenizer, model=model)


def token_logprobs(model, ids: list[int]) -> list[float]:
    """log p(ids[j+1] | ids[:j+1]) for every j: one forward pass (what the rollout engine computes)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1).tolist()


class ModelServer:
    """verl's server manager, answered by the tiny model: a scoring request (``prompt_logprobs``)
    gets prompt log-probs in verl's layout; a generation request gets ``reply`` (cut to
    ``max_tokens``) with the model's log-probs of it."""

    def __init__(self, model, reply: list[int]):
        self.model, self.reply, self.requests = model, list(reply), []

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        self.requests.append((list(prompt_ids), dict(sampling_params)))
        if sampling_params.get("prompt_logprobs") is not None:
            layout = [[lp] for lp in token_logprobs(self.model, list(prompt_ids))] + [[0.0]]
            return SimpleNamespace(token_ids=[0], log_probs=None, extra_fields={"prompt_logprobs": layout})
        reply = self.reply[: sampling_params.get("max_tokens", len(self.reply))]
        log_probs = token_logprobs(self.model, list(prompt_ids) + reply)[len(prompt_ids) - 1 :]
        return SimpleNamespace(
            token_ids=reply,
            log_probs=log_probs if sampling_params.get("logprobs") else None,
            num_preempted=0,
            routed_experts=None,
            extra_fields={},
        )


class Pool:
    def __init__(self, cache):
        self.snapshot = SimpleNamespace(remote=lambda: _ready({"version": 1, "cache": cache, "mode": "train"}))


async def _ready(value):
    return value


def make_loop(tiny, arise: dict, response_length=256, n=4):
    """The real ARISEAgentLoop (verl's Continuous Token builder for Qwen3), without verl's worker."""
    loop = ARISEAgentLoop.__new__(ARISEAgentLoop)
    selection = {"epsilon": 0.0, "use_gate": False, **arise.pop("selection", {})}
    loop.config = {"arise": {"phase1_steps": 0, "selection": selection, **arise}}
    loop.rollout_config = SimpleNamespace(
        n=n, val_kwargs=SimpleNamespace(n=1), prompt_length=256, response_length=response_length
    )
    loop.prompt_length, loop.response_length = 256, response_length
    loop.tokenizer, loop.processor = tiny.tokenizer, None
    loop.apply_chat_template_kwargs, loop.mm_processor_kwargs = {}, {}
    loop.continuous_token_builder = create_continuous_token_builder(tiny.tokenizer, hf_model_type="qwen3")
    solution = tiny.tokenizer.encode(SOLUTION, add_special_tokens=False) + [tiny.tokenizer.eos_token_id]
    loop.server_manager = ModelServer(tiny.model, solution)
    return loop


def run_sessions(loop, monkeypatch, sessions, uid, logprobs=True):
    monkeypatch.setattr(skill_layer_module, "get_replica", lambda: Pool(CACHE))

    async def go():
        loop.loop = asyncio.get_running_loop()
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": logprobs}
        kwargs = {"raw_prompt": MESSAGES, "uid": uid, "global_steps": 3}
        return [await loop.run(dict(params), session_id=s, **kwargs) for s in sessions]

    return asyncio.run(go())


def chat_ids(tokenizer, messages=MESSAGES):
    return scoring_prefix_ids(tokenizer, messages, suffix="")


# --------------------------------------------------------------------------- the agent loop


def test_on_the_skill_opens_the_response_with_mask_one(tiny, monkeypatch):
    tok = tiny.tokenizer
    loop = make_loop(tiny, {"selection": {"train_manager": True}})
    control, aided = run_sessions(loop, monkeypatch, [0, 1], uid="on")
    server = loop.server_manager
    scoring = [(ids, p) for ids, p in server.requests if p.get("prompt_logprobs") is not None]
    generation = [(ids, p) for ids, p in server.requests if p.get("prompt_logprobs") is None]

    chat = chat_ids(tok)
    head = tok.encode(MANAGER_SCORING_SUFFIX, add_special_tokens=False)
    newline = tok.encode("\n", add_special_tokens=False)
    solution = server.reply
    # the scoring context is chat(query) + "SKILL:" (no newline before it)
    assert len(scoring) == len(CACHE) and all(ids[: len(chat) + len(head)] == chat + head for ids, _ in scoring)

    info = aided.extra_fields
    assert info["arise_skill_in_response"] and info["arise_skill_id"]
    text = dict(CACHE)[info["arise_skill_id"]]
    skill = tok.encode(text, add_special_tokens=False)
    request = chat + head + skill
    assert request in [ids for ids, _ in scoring]  # the trained tokens are the scored ones
    # the prompt holds no skill; the response is SKILL: + skill + \n + solution
    assert aided.prompt_ids == chat and "SKILL" not in tok.decode(aided.prompt_ids)
    lead = head + skill + newline
    assert aided.response_ids == lead + solution
    assert aided.response_mask == [0] * len(head) + [1] * len(skill) + [0] * len(newline) + [1] * len(solution)
    assert info["arise_skill_tokens"] == len(lead)
    # the generation request continues the scoring context, with the skill line's room taken off
    assert generation[-1][0] == chat + lead
    assert generation[-1][1]["max_tokens"] == loop.response_length - len(lead)
    # rollout log-probs: the skill's from the scoring request, the solution's from the generation
    layout = [[lp] for lp in token_logprobs(tiny.model, request)] + [[0.0]]
    expected = skill_token_logprobs(layout, len(chat) + len(head), len(request))
    got = aided.response_logprobs
    assert got[len(head) : len(head) + len(skill)] == pytest.approx(expected, abs=1e-6)
    assert got[: len(head)] == [0.0] * len(head) and got[len(head) + len(skill) : len(lead)] == [0.0] * len(newline)
    assert got[len(lead) :] == pytest.approx(token_logprobs(tiny.model, chat + lead + solution)[len(chat + lead) - 1 :])
    s_k = skill_score(layout, len(chat) + len(head), len(request), "mean")
    assert s_k == pytest.approx(sum(expected) / len(skill))

    # the control arm stays unaided: the solution only, no skill tokens anywhere
    assert not control.extra_fields["arise_skill_in_response"] and control.extra_fields["arise_control"]
    assert control.prompt_ids == chat and control.response_ids == solution
    assert control.response_mask == [1] * len(solution)


def test_off_nothing_changes(tiny, monkeypatch):
    tok = tiny.tokenizer
    loop = make_loop(tiny, {})
    (aided,) = run_sessions(loop, monkeypatch, [1], uid="off")
    info = aided.extra_fields
    assert info["arise_skill_id"] and not info["arise_skill_in_response"]
    scoring = [ids for ids, p in loop.server_manager.requests if p.get("prompt_logprobs") is not None]
    assert all(tok.decode(ids).endswith(SCORING_SUFFIX + text) for ids, (_, text) in zip(scoring, CACHE, strict=True))
    # exactly verl's single-turn output on the prompt with the skill in the user turn
    doc = SkillDoc.from_dict(json.loads(dict(CACHE)[info["arise_skill_id"]]))

    async def plain():
        loop.loop = asyncio.get_running_loop()
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        return await SingleTurnAgentLoop.run(loop, params, raw_prompt=inject_skill(MESSAGES, doc))

    expected = asyncio.run(plain())
    assert aided.prompt_ids == expected.prompt_ids and "SKILL:{" in tok.decode(aided.prompt_ids)
    assert aided.response_ids == expected.response_ids == loop.server_manager.reply
    assert aided.response_mask == expected.response_mask == [1] * len(expected.response_ids)
    assert aided.response_logprobs == pytest.approx(expected.response_logprobs)


def test_on_respects_the_response_length(tiny, monkeypatch):
    tok = tiny.tokenizer
    head = tok.encode(MANAGER_SCORING_SUFFIX, add_special_tokens=False)
    longest = max(len(tok.encode(text, add_special_tokens=False)) for _, text in CACHE)
    limit = len(head) + longest + 1 + 3  # room for three solution tokens after any skill line
    loop = make_loop(tiny, {"selection": {"train_manager": True}}, response_length=limit)
    (out,) = run_sessions(loop, monkeypatch, [1], uid="short", logprobs=False)
    lead = out.extra_fields["arise_skill_tokens"]
    solution = loop.server_manager.reply
    assert len(out.response_ids) == len(out.response_mask) == min(lead + len(solution), limit)
    assert out.response_ids == (out.response_ids[:lead] + solution)[:limit] and out.response_logprobs is None
    assert loop.server_manager.requests[-1][1]["max_tokens"] == limit - lead >= 3
    # no room at all for the skill line: unaided, counted
    loop = make_loop(tiny, {"selection": {"train_manager": True}}, response_length=len(head) + 2)
    (out,) = run_sessions(loop, monkeypatch, [1], uid="tiny")
    assert out.extra_fields["arise_skill_overlong"] and not out.extra_fields["arise_skill_in_response"]
    assert out.extra_fields["arise_skill_id"] == "" and "SKILL" not in tok.decode(out.prompt_ids + out.response_ids)


def test_train_manager_refuses_random_selection():
    with pytest.raises(ValueError, match="train_manager"):
        ARISEConfig.from_dict({"selection": {"train_manager": True, "random": True}})
    assert ARISEConfig().selection.train_manager is False


def test_the_grader_grades_the_solution_not_the_leading_skill(tiny, monkeypatch):
    """The reward manager decodes the whole response (skill line included); grading reads the
    solution: a ``\\boxed{99}`` inside the skill neither counts nor hides the solution's box."""
    from verl import DataProto

    import recipe.arise.adapters.reward_manager as reward_manager_module
    from recipe.arise.adapters.reward_manager import ARISERewardManager

    tok = tiny.tokenizer
    trap = SKILLS[2].to_json()
    monkeypatch.setattr(reward_manager_module, "get_replica", lambda: None)

    def reward(solution_text, truth):
        response = (
            tok.encode("SKILL:", add_special_tokens=False)
            + tok.encode(trap, add_special_tokens=False)
            + tok.encode("\n", add_special_tokens=False)
            + tok.encode(solution_text, add_special_tokens=False)
            + [tok.eos_token_id]
        )
        prompt = chat_ids(tok)
        width = len(response) + 4
        responses = torch.tensor([response + [tok.pad_token_id] * 4])
        attention = torch.tensor([[1] * (len(prompt) + len(response)) + [0] * 4])
        data = DataProto.from_dict(
            tensors={"responses": responses, "attention_mask": attention, "prompts": torch.tensor([prompt])},
            non_tensors={
                "reward_model": [{"ground_truth": truth}],
                "tool_extra_fields": [{"arise_skill_id": "s3", "arise_phase": 2, "arise_skill_in_response": True}],
            },
        )
        assert responses.shape[1] == width
        manager = object.__new__(ARISERewardManager)  # no verl set-up: what run_single reads
        manager.arise, manager.tokenizer = ARISEConfig(), tok

        async def go():
            manager.loop = asyncio.get_running_loop()
            return await ARISERewardManager.run_single(manager, data)

        return asyncio.run(go())

    assert reward(SOLUTION, "3")["reward_score"] == 2.0  # right, with a skill: R = 2
    assert reward(SOLUTION, "99")["reward_score"] == 0.0  # the skill's box is not the answer
    assert reward("1 plus 2 is 3.", "99")["reward_score"] == 0.0  # no box in the solution: wrong


# --------------------------------------------------------------------------- verl's log-probs and loss


def verl_batch(tokenizer, outputs, prompt_length=128, response_length=160):
    """Pad AgentLoopOutputs as verl's agent-loop worker does (its own ``_pad_token_ids``)."""
    from tensordict import TensorDict
    from verl.utils.model import compute_position_id_with_mask

    worker = SimpleNamespace(tokenizer=tokenizer)
    pad = AgentLoopWorker._pad_token_ids.__get__(worker)
    rows = []
    for out in outputs:
        prompt = pad(out.prompt_ids, max_length=prompt_length, padding_side="left", return_attention_mask=True)
        response = pad(out.response_ids, max_length=response_length, padding_side="right", return_attention_mask=True)
        mask = pad(out.response_mask, max_length=response_length, padding_side="right", return_attention_mask=False)
        attention = torch.cat([prompt["attention_mask"], response["attention_mask"]], dim=1)
        rows.append(
            {
                "prompts": prompt["input_ids"],
                "responses": response["input_ids"],
                "input_ids": torch.cat([prompt["input_ids"], response["input_ids"]], dim=1),
                "attention_mask": attention,
                "position_ids": compute_position_id_with_mask(attention),
                "response_mask": mask["input_ids"] * response["attention_mask"],
            }
        )
    fields = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    return TensorDict(fields, batch_size=[len(outputs)])


def verl_log_probs(model, batch):
    """The actor's log-probs over the response, on verl's path: no-padding layout
    (``left_right_2_no_padding``), labels rolled by one, ``logprobs_from_logits``, then
    ``no_padding_2_padding`` back to (batch, response_length). Sequences go through the model one
    by one (verl packs them with varlen attention, which the CPU lacks; the values are the same)."""
    from verl.utils.torch_functional import logprobs_from_logits
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    data = left_right_2_no_padding(batch.clone())
    ids, pos = data["input_ids"], data["position_ids"]
    logits = torch.cat(
        [
            model(input_ids=i.unsqueeze(0), position_ids=p.unsqueeze(0)).logits[0].float()
            for i, p in zip(ids.unbind(), pos.unbind(), strict=True)
        ]
    )
    labels = torch.roll(ids.values(), shifts=-1, dims=0)
    log_probs = logprobs_from_logits(logits, labels)
    nested = torch.nested.nested_tensor_from_jagged(log_probs, offsets=ids.offsets())
    return no_padding_2_padding(nested, data)


def test_verl_log_probs_of_the_skill_tokens_are_the_scoring_values(tiny, monkeypatch):
    loop = make_loop(tiny, {"selection": {"train_manager": True}})
    outputs = run_sessions(loop, monkeypatch, [0, 1, 2, 3], uid="logprobs")
    batch = verl_batch(tiny.tokenizer, outputs)
    with torch.no_grad():
        log_probs = verl_log_probs(tiny.model, batch)
    mask = batch["response_mask"].bool()
    assert torch.isfinite(log_probs[mask]).all()
    for row, out in enumerate(outputs):
        n = len(out.response_ids)
        rollout = torch.tensor(out.response_logprobs)
        skill = torch.tensor(out.response_mask, dtype=torch.bool)
        if out.extra_fields["arise_skill_in_response"]:
            head = len(tiny.tokenizer.encode(MANAGER_SCORING_SUFFIX, add_special_tokens=False))
            k = out.extra_fields["arise_skill_tokens"] - head - 1
            skill[head + k :] = False  # the skill tokens only
            assert skill.sum() == k > 10
        # verl's old/new log-probs on the skill positions = the scoring request's per-token values
        assert torch.allclose(log_probs[row, :n][skill], rollout[skill], atol=1e-4)
        assert torch.allclose(log_probs[row, :n][mask[row, :n]], rollout[mask[row, :n]], atol=1e-4)


def skill_scores(model, tokenizer, train_manager: bool) -> list[float]:
    """s_k of every cache skill on the project's scoring path (mean-normalised, Eq. 2)."""
    from recipe.arise.core.scoring import scoring_requests, scoring_suffix

    prefix = scoring_prefix_ids(tokenizer, MESSAGES, scoring_suffix(train_manager))
    scores = []
    for ids in scoring_requests(tokenizer, prefix, [text for _, text in CACHE], 128):
        layout = [[lp] for lp in token_logprobs(model, ids)] + [[0.0]]
        scores.append(skill_score(layout, len(prefix), len(ids), "mean"))
    return scores


def one_grpo_update(tiny, monkeypatch, train_manager: bool, rewards: list[float], uid: str) -> float:
    """One GRPO step (verl's advantage, policy loss and token-mean aggregation, AdamW) on a group of
    four: session 0 the control arm, 1-3 with the selected skill. Returns the change of that
    skill's s_k measured on the scoring path of the same mode."""
    import copy

    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_policy_loss_fn

    model = copy.deepcopy(tiny.model)
    loop = make_loop(
        SimpleNamespace(tokenizer=tiny.tokenizer, model=model), {"selection": {"train_manager": train_manager}}
    )
    outputs = run_sessions(loop, monkeypatch, [0, 1, 2, 3], uid=uid)
    chosen = {o.extra_fields["arise_skill_id"] for o in outputs[1:]}
    assert len(chosen) == 1 and outputs[0].extra_fields["arise_control"]
    k = [sid for sid, _ in CACHE].index(chosen.pop())
    batch = verl_batch(tiny.tokenizer, outputs)
    mask = batch["response_mask"].float()
    scores = torch.zeros_like(mask)
    scores[:, 0] = torch.tensor(rewards)  # GRPO sums the token-level rewards of a response
    advantages, _ = compute_grpo_outcome_advantage(scores, mask, index=[uid] * len(outputs))
    before = skill_scores(model, tiny.tokenizer, train_manager)[k]

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    with torch.no_grad():
        old = verl_log_probs(model, batch)
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "global_batch_info": {}}
    )
    loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=old,
        log_prob=verl_log_probs(model, batch),
        advantages=advantages,
        response_mask=mask.bool(),
        loss_agg_mode="token-mean",
        config=config,
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.eval()
    return skill_scores(model, tiny.tokenizer, train_manager)[k] - before


def test_one_update_moves_the_winning_skill_score(tiny, monkeypatch):
    # control arm R=1; the skill's trajectories R = 2, 2, 0: the skill won (sum of its A > 0)
    won = [1.0, 2.0, 2.0, 0.0]
    lost = [1.0, 0.0, 0.0, 2.0]  # sum of the skill trajectories' A < 0
    up = one_grpo_update(tiny, monkeypatch, True, won, "won")
    down = one_grpo_update(tiny, monkeypatch, True, lost, "lost")
    off_up = one_grpo_update(tiny, monkeypatch, False, won, "won-off")
    off_down = one_grpo_update(tiny, monkeypatch, False, lost, "lost-off")
    assert up > 0 > down
    # off (skill in the prompt, out of the loss): s_k moves only through shared weights
    assert min(abs(up), abs(down)) > 5 * max(abs(off_up), abs(off_down)), (up, down, off_up, off_down)
    assert math.isfinite(up) and math.isfinite(down)
