"""What ``arise_agent``'s train_manager relies on in verl's ``SingleTurnAgentLoop.run`` (installed
verl; recipe/arise/adapters/agent_loop.py ``_SkillLineServer``, docs/agent_loops.md).

train_manager runs verl's own ``run`` and continues its engine request after the skill line, so
verl must (1) send exactly one request, through ``self.server_manager.generate`` with keyword
arguments, (2) on the prompt its Continuous Token builder renders for ``raw_prompt`` (the scoring
context), and (3) put the tokens the engine answered at the start of the response, mask 1, with
their log-probs. Should a verl upgrade change any of this, this test fails instead of the skill
line silently landing elsewhere.
"""

import asyncio
from types import SimpleNamespace

from byte_tokenizer import ByteTokenizer
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop  # noqa: E402

MESSAGES = [{"role": "user", "content": "What is 1 plus 2?"}]


class Server:
    def __init__(self):
        self.calls = []

    async def generate(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return SimpleNamespace(
            token_ids=[7, 8, 9], log_probs=[-0.5, -0.25, -0.125], num_preempted=0, routed_experts=None, extra_fields={}
        )


def test_one_keyword_request_on_the_builders_prompt_whose_tokens_open_the_response():
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 64, "response_length": 16, "full_determinism": False}}}
    )
    server = Server()

    async def go():
        loop = SingleTurnAgentLoop(
            trainer_config=DictConfigWrap(config),
            server_manager=server,
            tokenizer=ByteTokenizer(),
            processor=None,
            dataset_cls=None,
            data_config=DictConfigWrap(OmegaConf.create({})),
        )
        output = await loop.run({"logprobs": True}, raw_prompt=MESSAGES)
        return loop, output

    loop, output = asyncio.run(go())
    assert len(server.calls) == 1
    args, kwargs = server.calls[0]
    assert args == () and {"request_id", "prompt_ids", "sampling_params"} <= set(kwargs)
    assert kwargs["prompt_ids"] == loop.continuous_token_builder.build_initial_tokens(MESSAGES)
    assert output.prompt_ids == kwargs["prompt_ids"]
    assert output.response_ids == [7, 8, 9] and output.response_mask == [1, 1, 1]
    assert output.response_logprobs == [-0.5, -0.25, -0.125]
