"""A ``SkillLayer`` in a stand-in agent loop (importable as ``skill_layer_host``; adapters tests only:
it imports verl and the adapters)."""

from __future__ import annotations

from types import SimpleNamespace

from byte_tokenizer import ByteTokenizer
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from recipe.arise.adapters.scoring_context import ScoringContext
from recipe.arise.adapters.skill_layer import SkillLayer


def skill_layer(server, n=4, **rollout) -> SkillLayer:
    """The layer of a loop on ``server`` (verl's server manager: ``generate``), a
    :class:`ByteTokenizer` and verl's continuous token builder for it; groups of ``n`` in training,
    1 in validation; ``rollout`` adds rollout-config fields (``name``, ``enable_prefix_caching``)."""
    tokenizer = ByteTokenizer()
    host = SimpleNamespace(
        tokenizer=tokenizer,
        continuous_token_builder=create_continuous_token_builder(tokenizer),
        server_manager=server,
        rollout_config=SimpleNamespace(n=n, val_kwargs=SimpleNamespace(n=1), **rollout),
    )
    return SkillLayer(host)


def scoring_context_of(tokenizer):
    """A trainer stub's ``_scoring_context``: verl's Continuous Token builder for ``tokenizer``, no tools."""
    builder = create_continuous_token_builder(tokenizer)
    return lambda extra_info=None: ScoringContext(builder, tokenizer)


def build_loop(cls, tokenizer, server, config, **extra):
    """An agent loop as verl's worker builds it (``AgentLoopWorker._run_agent_loop``) for a text-only
    Qwen3 run: no processor, no dataset class; ``extra`` e.g. ``tools=ToolListWrap(...)``."""
    return cls(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        data_config=DictConfigWrap(OmegaConf.create({})),
        processor=None,
        dataset_cls=None,
        hf_model_type="qwen3",
        **extra,
    )


class _Rendered(Exception):
    """Stops verl's ToolAgentLoop.run once it has chosen the sample's tools."""


def verl_tool_schemas(loop, extra_info=None, messages=None) -> list[dict]:
    """The tool schemas verl's own ``ToolAgentLoop.run`` renders a sample's prompt with (its per-sample
    ``extra_info.tool_selection``), read off its agent data where it builds the first prompt."""
    import asyncio

    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    chosen = []

    async def pending(agent_data, sampling_params):
        chosen.append(agent_data._active_tool_schemas)
        raise _Rendered

    async def go():
        loop._handle_pending_state = pending  # on the instance: the class's is ARISE's or verl's
        try:
            await ToolAgentLoop.run(
                loop, {}, raw_prompt=messages or [{"role": "user", "content": "q"}], extra_info=extra_info
            )
        except _Rendered:
            pass
        finally:
            del loop._handle_pending_state

    asyncio.run(go())
    return chosen[0]
