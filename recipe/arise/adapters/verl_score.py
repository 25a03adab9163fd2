"""verl ``custom_reward_function`` with the project's grader, for the GRPO-family baselines.

Same correctness check as ARISE (last ``\\boxed{}``, math-verify, bounded time), binary reward.
"""

from recipe.arise.core.grader import grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    correct = grade(solution_str, ground_truth)
    return {"score": float(correct), "acc": float(correct)}
