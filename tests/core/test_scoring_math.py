"""recipe.arise.core.scoring: the pmi score and the prompt log-prob layouts of a prefix-cache hit.

verl's list for a prompt of L tokens (entry j = the log-prob of token j + 1, one padding entry):
vLLM's V1 model runner gives L entries (those below the hit H uninitialised), its V2 runner the
L - H computed ones (tokens H + 1 .. L - 1, then the padding).
"""

import math

import pytest
from byte_tokenizer import ByteTokenizer

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.core.scoring import (
    MANAGER_SCORING_SUFFIX,
    QUERY_FREE_MESSAGES,
    SCORE_NORMS,
    SCORING_SUFFIX,
    computed_ids_match,
    computed_rows,
    merge_cached_rows,
    query_free_prefix_ids,
    scoring_prefix_ids,
    skill_score,
)

L, H = 10, 4
TRUE = [[-(j + 1) / 10] for j in range(L - 1)] + [[0.0]]  # token j + 1's log-prob, then verl's padding
V1 = [[1e26]] * H + TRUE[H:]
V2 = TRUE[H:]
PROMPT = list(range(100, 100 + L))


def test_pmi_is_the_mean_minus_the_query_free_mean():
    assert "pmi" in SCORE_NORMS
    lp = [[-1.0], [-2.0], [-3.0], [-4.0], [0.0]]
    assert skill_score(lp, 3, 5, "pmi", baseline=-2.5) == pytest.approx(-3.5 + 2.5)
    assert skill_score(lp, 3, 5, "pmi", baseline=-4.0) == pytest.approx(0.5)  # the query raised it
    assert math.isnan(skill_score(lp, 3, 5, "pmi", baseline=math.nan))  # unusable baseline: unscorable
    assert math.isnan(skill_score(None, 3, 5, "pmi", baseline=-1.0))  # unusable query numbers, as for mean
    with pytest.raises(ValueError, match="baseline"):
        skill_score(lp, 3, 5, "pmi")


def test_pmi_is_a_config_option_and_mean_stays_the_default():
    assert ARISEConfig().selection.score_norm == "mean"
    assert ARISEConfig.from_dict({"selection": {"score_norm": "pmi"}}).selection.score_norm == "pmi"
    with pytest.raises(ValueError, match="pmi"):
        ARISEConfig.from_dict({"selection": {"score_norm": "median"}})


def test_the_query_free_context_is_the_chat_template_of_an_empty_user_turn():
    tok = ByteTokenizer()
    assert QUERY_FREE_MESSAGES == ({"role": "user", "content": ""},)
    for suffix in (SCORING_SUFFIX, MANAGER_SCORING_SUFFIX):
        ids = query_free_prefix_ids(tok, suffix)
        assert bytes(ids).decode() == "U:|A:" + suffix
        assert ids == scoring_prefix_ids(tok, [{"role": "user", "content": ""}], suffix)


def test_both_layouts_give_the_computed_rows():
    assert computed_rows(V1, L, H) == TRUE[H:]
    assert computed_rows(V2, L, H) == TRUE[H:]
    assert computed_rows(TRUE, L, 0) == TRUE  # no hit: both layouts are the full list
    assert computed_rows([[0.0]], L, L - 1) == [[0.0]]  # V2, only the last token computed: the padding
    assert computed_rows(V2[1:], L, H) is None and computed_rows(V1 + [[0.0]], L, H) is None
    with pytest.raises(ValueError):
        computed_rows(TRUE, L, L)  # vLLM always computes the last prompt token


def test_the_merge_takes_the_cached_rows_from_the_source():
    for rows in (V1, V2):
        assert merge_cached_rows(TRUE, rows, L, H) == TRUE
    assert merge_cached_rows(TRUE, V2[:-2], L, H) is None
    assert merge_cached_rows(TRUE[:2], V2, L, H) is None  # a source without the rows


def test_verls_prompt_ids_confirm_the_layout():
    ids = [[t] for t in PROMPT[1:]] + [[0]]
    v1_ids = [[7]] * H + ids[H:]  # garbage below the hit, as the rows
    assert computed_ids_match(v1_ids, PROMPT, H) and computed_ids_match(ids[H:], PROMPT, H)
    shifted = ids[H - 1 : -2] + [[0]]  # V2's length, one token early
    assert len(shifted) == L - H and not computed_ids_match(shifted, PROMPT, H)
    assert not computed_ids_match(ids[H + 1 :], PROMPT, H)  # no layout's length
    assert not computed_ids_match([None] * (L - H), PROMPT, H)
