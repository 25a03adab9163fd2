"""Tiny environment assets for the CPU end-to-end run of the env agent (``ENV=twx``).

The tiny ``Qwen3ForCausalLM`` of :mod:`recipe.arise.cpu.tiny` (same architecture and chat format),
with a tokenizer whose corpus is TextWorldExpress's coin-collector text, and a warm start on the
episode FORMAT (:mod:`recipe.arise.core.env_prompts`: the task, the first observation appended to
it, one user turn per later observation, ``Action: <action>`` replies). The game: coin collector in
two rooms (:data:`PARAMS`), whose expert takes the coin when it is in view and otherwise moves to
the other room (TWX's gold action sequence, :func:`expert_action`).

Never a rule: every reply it is taught is the expert's action with probability
:data:`P_EXPERT_UNAIDED`, else a random admissible action, so episodes are won neither always nor
never within the turn budget (groups have reward variance); with a coin skill injected (``SKILL:``
line, one naming the coin strategy: the tiny ones or those the summary writes) the expert's rate
is :data:`P_EXPERT_SKILL`, a seed (math) skill leaves it unaided: R=2 beside R=1 in Phase II. The
summary rollout is taught to write a coin skill from won episodes' transcripts (naming the room the
coin was in), and the manager's scoring context (chat(task) + ``\\nSKILL:``) a coin skill.

The build takes its world as a :class:`World` (default :data:`TWX`, the coin game);
:mod:`recipe.arise.cpu.tiny_env_sw` builds ScienceWorld's with the same code.

usage: python -m recipe.arise.cpu.tiny_env OUT_DIR | --cached
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.arise.cpu import asset_cache, tiny
from recipe.arise.cpu import tiny_env_game as game

P_EXPERT_UNAIDED = 0.5
P_EXPERT_SKILL = 0.95
TURNS = game.TURNS
NOISY_COPIES = 4  # episodes played per (game, prompt) to realise those rates in the warm-start data
MAX_POSITIONS = 2048  # the episode (3 turns of ~130 tokens) and the summary prompt of 2 transcripts

# The coin skills of the tiny world (the seeds are math skills: irrelevant to the game)
_COIN_SKILLS = [
    {
        "skill_name": "take_coin_in_view",
        "problem_type": "general",
        "key_insight": "Take the coin as soon as the room shows it",
        "method": ["Read the room for a coin", "Take the coin"],
        "check": "You take the coin",
    },
    {
        "skill_name": "search_next_room",
        "problem_type": "general",
        "key_insight": "No coin in view: move to the other room",
        "method": ["Move through the only exit", "Take the coin there"],
        "check": "You take the coin",
    },
]


def distilled_skill(room: str, direction: str | None) -> dict:
    """What the summary rollout is taught to write for a won episode: the coin strategy, worded with
    where the coin was (``direction`` None: in view at the start), so every distilled skill is its
    own document."""
    where = f"move {direction} to the {room}" if direction else f"it is in the {room}"
    return {
        "skill_name": "find_coin",
        "problem_type": "general",
        "key_insight": f"Take the coin in view, else {where}",
        "method": ["Look for the coin", f"Else move {direction or 'on'}", "Take it"],
        "check": "You took it",
    }


@dataclass(frozen=True)
class World:
    """A tiny env world: its game module (``write_data``, ``Player``, ``GAME``), the strategy skills
    the warm start teaches, what the summary of a won episode is taught to write
    (``distilled(*episode.hint)``), the model's positions, and the files under recipe/arise of its
    environment's adapter (hashed into the cache key)."""

    env: str
    game: Any
    skills: list[dict]
    distilled: Callable[..., dict]
    max_positions: int
    sources: tuple[str, ...]
    p_unaided: float = P_EXPERT_UNAIDED  # the noisy expert's rate unaided (and with a seed skill)


TWX = World("twx", game, _COIN_SKILLS, distilled_skill, MAX_POSITIONS, ("envs/textworld_express.py",))


def summary_prompt(task: str, transcripts: list[str]) -> str:
    """The summary prompt of won episodes as the trainer builds it (default arise.summary and
    arise.env settings: each transcript compacted by env_transcript, the env domain)."""
    from recipe.arise.core.arise_config import SummaryConfig
    from recipe.arise.core.env_config import EnvConfig
    from recipe.arise.core.prompts import build_summary_prompt
    from recipe.arise.core.transcript import env_transcript

    cfg = SummaryConfig()
    traces = [env_transcript(t, cfg.trace_clip_chars, cfg.tool_result_chars, cfg.transcript_chars).text
              for t in transcripts]  # fmt: skip
    return build_summary_prompt(task, traces, max_traces=cfg.max_traces, clip_chars=cfg.transcript_chars,
                                domain=EnvConfig().summary_domain)  # fmt: skip


def _render(tokenizer, messages, add_generation_prompt=False) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


def episode_example(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """(ids, labels mask) of a whole episode: 1 on every assistant turn's tokens and its end token,
    as the agent loop's response mask (the observation turns between are 0)."""
    ids = _render(tokenizer, messages[:1], add_generation_prompt=True)
    labels = [0] * len(ids)
    for k in range(1, len(messages), 2):
        turn = tokenizer.encode(messages[k]["content"], add_special_tokens=False) + [tokenizer.eos_token_id]
        ids, labels = ids + turn, labels + [1] * len(turn)
        if k + 1 < len(messages):
            upto = _render(tokenizer, messages[: k + 2], add_generation_prompt=True)
            if upto[: len(ids)] != ids:
                raise RuntimeError("the chat template does not render an episode turn by turn")
            labels += [0] * (len(upto) - len(ids))
            ids = upto
    return ids, labels


def chat_example(tokenizer, user: str, target: str, scoring: bool = False) -> tuple[list[int], list[int]]:
    """(ids, labels mask) of one user turn and its reply; ``scoring``: the manager's scoring context
    (chat(user) + ``\\nSKILL:``, then the skill, no end token)."""
    from recipe.arise.core.scoring import SCORING_SUFFIX

    prompt = _render(tokenizer, [{"role": "user", "content": user}], add_generation_prompt=True)
    if scoring:
        prompt += tokenizer.encode(SCORING_SUFFIX, add_special_tokens=False)
    reply = tokenizer.encode(target, add_special_tokens=False) + ([] if scoring else [tokenizer.eos_token_id])
    return prompt + reply, [0] * len(prompt) + [1] * len(reply)


def warm_start(model, pad_id: int, stages, seed: int, lr: float = 3e-3) -> float:
    """Supervised warm start on (ids, labels mask) examples; stages of (examples, steps, batch),
    interleaved step by step (as tiny.warm_start)."""
    import torch

    rng = random.Random(seed)
    schedule = [(index, batch) for index, (_, steps, batch) in enumerate(stages) for _ in range(steps)]
    rng.shuffle(schedule)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.zeros(())
    for index, batch_size in schedule:
        pool = stages[index][0]
        batch = [pool[rng.randrange(len(pool))] for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), pad_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (seq, lab) in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(seq)] = torch.where(torch.tensor(lab) == 1, torch.tensor(seq), -100)
            mask[row, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def build_env_assets(out_dir: str | os.PathLike, sft_steps: int = 240, seed: int = 0, world: World = TWX) -> dict:
    """Write model/, data/train.parquet, data/val.parquet under ``out_dir``; return their paths.

    Warm-start stages, interleaved: unaided episodes (``sft_steps``), episodes with an injected skill
    (1/2), the summary of won transcripts (1/2) and the scoring context (1/8)."""
    from recipe.arise.core.env_prompts import task_prompt
    from recipe.arise.core.prompts import inject_skill
    from recipe.arise.core.skill import SkillDoc, load_seed_skills

    started = time.time()
    out, model_dir, data_dir = asset_cache.asset_dirs(out_dir)
    rng = random.Random(seed)
    train_games, _ = world.game.write_data(data_dir)

    seeds = load_seed_skills()
    coin_docs = [SkillDoc.from_dict(s) for s in world.skills]
    player = world.game.Player()
    try:
        task = player.task(train_games[0])
        user = task_prompt(task)
        # episodes: unaided; with a seed skill (unaided rate); with a coin skill (the expert's rate)
        plain, skilled, won = [], [], []
        for g in train_games:
            for _ in range(NOISY_COPIES):
                ep = player.play(g, user, world.p_unaided, rng)
                plain.append(ep.messages)
                if ep.won:
                    won.append(ep)
            distilled = SkillDoc.from_dict(world.distilled(*player.skill_hint(g)))
            for doc, p in [(d, world.p_unaided) for d in seeds] + [(d, P_EXPERT_SKILL) for d in coin_docs]:
                skilled.append(player.play(g, inject_skill([{"role": "user", "content": user}], doc)[0]["content"],
                                           p, rng).messages)  # fmt: skip
            injected = inject_skill([{"role": "user", "content": user}], distilled)[0]["content"]
            skilled += [player.play(g, injected, P_EXPERT_SKILL, rng).messages for _ in range(2)]
    finally:
        player.close()
    if not won:
        raise RuntimeError(f"no warm-start episode was won: the {world.env} game or its expert is broken")

    summaries = []
    for ep in won:
        other = rng.choice(won)
        for traces in ([ep.transcript], [ep.transcript, other.transcript]):
            target = json.dumps(world.distilled(*ep.hint), separators=(",", ":"))
            summaries.append((summary_prompt(task, traces), target))
    scoring = [(user, json.dumps(s, separators=(",", ":"))) for s in world.skills]
    scoring += [(user, json.dumps(world.distilled(*ep.hint), separators=(",", ":"))) for ep in won[:20]]

    # the tokenizer's corpus: rendered episodes, summary prompts, skill documents
    skill_texts = [d.to_json() for d in seeds + coin_docs] + [t for _, t in summaries[:20]]
    texts = [m["content"] for msgs in plain[:60] + skilled[:40] for m in msgs]
    texts += [p for p, _ in summaries[:10]] + skill_texts * 3
    built = tiny.build_tokenizer(model_dir, texts)
    model = tiny.build_model(built, seed)
    model.config.max_position_embeddings = world.max_positions  # RoPE: positions are not parameters
    model.config.save_pretrained(model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)  # as verl and vLLM load it
    tokenizer.model_max_length = world.max_positions
    tokenizer.save_pretrained(model_dir)
    for text in texts[:10] + skill_texts:
        if tokenizer.encode(text, add_special_tokens=False) != built.encode(text, add_special_tokens=False):
            raise RuntimeError(f"the tiny tokenizer encodes differently after reloading: {text[:60]!r}")

    stages = [
        ([episode_example(tokenizer, m) for m in plain], sft_steps, 8),
        ([episode_example(tokenizer, m) for m in skilled], sft_steps // 2, 8),
        ([chat_example(tokenizer, p, t) for p, t in summaries], sft_steps // 2, 4),
        ([chat_example(tokenizer, p, t, scoring=True) for p, t in scoring], sft_steps // 8, 8),
    ]
    with asset_cache.one_torch_thread():
        loss = warm_start(model, tokenizer.pad_token_id, stages, seed=seed)
    model.save_pretrained(model_dir)
    longest = max(len(ids) for ids, _ in stages[1][0])
    first_turn_tokens = max(_render(tokenizer, m[:1], add_generation_prompt=True).__len__() for m in skilled)
    return asset_cache.write_info(
        out, started, loss, env=world.env, game=world.game.GAME, vocab=len(tokenizer), prompt_tokens=first_turn_tokens,
        longest_episode_tokens=longest, won_fraction=round(len(won) / len(plain), 3),
    )  # fmt: skip


def measure(assets: str | os.PathLike, games: int = 8, seed: int = 0, world: World = TWX) -> dict:
    """Sampled (temperature 1) episodes of the built model on validation games through the adapter:
    the win rate unaided and with a coin skill injected, and whether the summary of a won transcript
    parses as a skill (what the smoke run relies on: reward variance, a skill uplift, parsed skills)."""
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipe.arise.core.env_prompts import task_prompt
    from recipe.arise.core.prompts import inject_skill
    from recipe.arise.core.skill import SkillDoc, parse_summary

    model_dir = Path(assets) / "model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)

    def reply(messages, max_new=24):
        ids = torch.tensor([_render(tokenizer, messages, add_generation_prompt=True)])
        out = model.generate(ids, max_new_tokens=max_new, do_sample=True, temperature=1.0, top_p=1.0,
                             pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    val_rows = pd.read_parquet(Path(assets) / "data" / "val.parquet")
    val = [json.loads(info["env"])["game"] for info in val_rows["extra_info"]]
    player = world.game.Player()
    wins = {"unaided": 0, "coin_skill": 0}
    won = []
    try:
        task = player.task(val[0])
        user = task_prompt(task)
        skilled = inject_skill([{"role": "user", "content": user}], SkillDoc.from_dict(world.skills[1]))[0]["content"]
        with asset_cache.one_torch_thread(), torch.no_grad():
            for arm, turn in (("unaided", user), ("coin_skill", skilled)):
                for g in val[:games]:
                    ok, text = player.play_model(g, turn, reply)
                    wins[arm] += int(ok)
                    won += [text] if ok else []
            parsed = 0
            for text in won[:4]:
                doc, _ = parse_summary(reply([{"role": "user", "content": summary_prompt(task, [text])}], 96))
                parsed += doc is not None
    finally:
        player.close()
    return {f"won_{k}": v / games for k, v in wins.items()} | {"summaries_parsed": f"{parsed}/{min(4, len(won))}"}


def assets_key(world: World = TWX) -> str:
    """tiny's key (its sources and library versions) with this module's and those of what it
    renders and plays (the episode's text, the summary's, the adapter, the data prep)."""
    import hashlib

    here = Path(__file__).resolve()
    h = hashlib.sha256(tiny.assets_key().encode())
    arise = here.parents[1]  # the episode's text, its summary, the game and its rows
    for path in (here, here.parent / "tiny_env_game.py", Path(world.game.__file__), here.parent / "asset_cache.py",
                 *(arise / "core" / f for f in ("env_prompts.py", "transcript.py", "env_config.py", "arise_config.py")),
                 *(arise / f for f in world.sources), arise / "data_prep" / "env.py"):  # fmt: skip
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cached_assets(root: str | os.PathLike | None = None, world: World = TWX) -> Path:
    """The env assets in the content-keyed cache, beside tiny's default ones, built on first use."""
    return asset_cache.build_cached_assets(cache_folder(root, world), lambda out: build_env_assets(out, world=world))


def cache_folder(root: str | os.PathLike | None = None, world: World = TWX) -> Path:
    """Where the env assets live in the cache (built or not)."""
    return asset_cache.cache_root(root) / f"tiny-{tiny.ASSETS_FAMILY}-env-{world.env}-{assets_key(world)}"


def main(argv=None):
    asset_cache.variant_main(argv, __doc__, build_env_assets, cached_assets, sft_steps=240)


if __name__ == "__main__":
    main()
