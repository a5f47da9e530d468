"""Speculative sampling with a DLite drafter is lossless: the generated tokens follow the target's distribution.

A tiny target with a 16-token vocabulary makes the exact distribution of the first generated tokens computable by
brute force (one batched target forward over every prefix). Token 1 comes from the prefill; with
`max_new_tokens=4` the first draft round proposes two tokens (the budget is `max_length - len - 1`), so tokens 2 and
3 come from drafted positions (accepted, or resampled from the residual after a rejection). A chi-square
goodness-of-fit test compares many seeded DLite-assisted samples with the exact marginals; the same test must
reject when the candidate generator returns logits other than the ones the drafts were sampled from.
"""

from __future__ import annotations

import contextlib
import copy
import itertools

import pytest
import torch
from chi_square import chi2_sf, chi_square_test
from tiny_models import make_drafter, make_tiny_target

from dlite_hf import DLiteCandidateGenerator, DraftSession
from dlite_hf.draft_vocab import set_draft_vocab

pytestmark = pytest.mark.heavy  # thousands of seeded generations a test: in `make test` and CI, not test-fast

VOCAB = 16
PROMPT = torch.tensor([[3, 7, 1, 12]])
P = PROMPT.shape[1]
MAX_NEW = 4
ALPHA = 1e-3
N_SAMPLES = 1500  # per setting; about 15 s each on one thread
N_POWER = 500

SETTINGS = {
    "t1": {"temperature": 1.0, "top_k": 0},  # no logits processor at all
    "t0.7_top6": {"temperature": 0.7, "top_k": 6},  # drafts are sampled from processed logits
}
# the same with adaptive drafting: a round stops early when the drafter's joint confidence in its sampled drafts
# falls below 0.98, and proposes nothing when its most likely first draft's probability is below 0.8 (decided
# before drawing); the tokens must still follow the target
ADAPTIVE_SETTINGS = {"t1_adaptive": ("t1", 0.98, 0.8)}  # skips ~40% of first rounds (top q < 0.8)


@pytest.fixture(scope="module")
def peaked_pair():
    target = make_tiny_target("qwen3", seed=3, vocab_size=VOCAB)
    drafter = make_drafter(target, seed=4)
    with torch.no_grad():
        target.lm_head.weight.mul_(10.0)  # a peaked target distribution (random init is nearly uniform) ...
        drafter.norm.weight.mul_(20.0)  # ... and a peaked drafter that disagrees with it
    return target, drafter.bind_target(target)


# ---------------------------------------------------------------------------------------------------------------------
# exact distributions and the chi-square test
# ---------------------------------------------------------------------------------------------------------------------


def _process(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """Temperature then top-k, written independently of transformers' warpers."""
    logits = logits / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def exact_marginals(target, temperature: float, top_k: int, prompt: torch.Tensor = PROMPT) -> list[torch.Tensor]:
    """Exact distributions of generated tokens 1, 2 and 3 (float64), from all V^2 two-token continuations."""
    P = prompt.shape[1]  # noqa: N806 (the module's name for the prompt length)
    pairs = torch.tensor(list(itertools.product(range(VOCAB), repeat=2)))  # [V^2, 2]: (t1, t2)
    sequences = torch.cat([prompt.expand(len(pairs), -1), pairs], 1)
    with torch.no_grad():
        logits = target(sequences).logits.double()
    probs = _process(logits, temperature, top_k).softmax(-1)
    p1 = probs[0, P - 1]  # p(t1 | prompt)
    p2 = probs[:, P].reshape(VOCAB, VOCAB, VOCAB)[:, 0]  # [t1, t2] = p(t2 | prompt, t1)
    p3 = probs[:, P + 1].reshape(VOCAB, VOCAB, VOCAB)  # [t1, t2, t3] = p(t3 | prompt, t1, t2)
    m2 = (p1[:, None] * p2).sum(0)
    m3 = (p1[:, None, None] * p2[:, :, None] * p3).sum((0, 1))
    for m in (p1, m2, m3):
        assert abs(float(m.sum()) - 1.0) < 1e-9
    return [p1, m2, m3]


def test_chi2_survival_function_matches_the_table():
    # critical values at alpha = 1e-3 from the chi-square table (df: value)
    for df, critical in {1: 10.828, 2: 13.816, 5: 20.515, 10: 29.588, 15: 37.697}.items():
        assert chi2_sf(critical, df) == pytest.approx(1e-3, rel=2e-3), df
    assert chi2_sf(0.0, 4) == pytest.approx(1.0)
    counts = torch.tensor([50.0, 30.0, 20.0, 0.0])
    statistic, df, p = chi_square_test(counts, torch.tensor([0.5, 0.3, 0.2, 0.0]))
    assert statistic == pytest.approx(0.0) and df == 2 and p == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------------------------------


def assert_follows(counts: torch.Tensor, marginals: list[torch.Tensor], label: str) -> None:
    """Every generated position's counts pass the chi-square test against its exact marginal."""
    n = float(counts[0].sum())
    for token, (row, probs) in enumerate(zip(counts, marginals), start=1):
        statistic, df, p_value = chi_square_test(row, probs)
        assert p_value > ALPHA, (
            f"{label}: token {token} does not follow the target distribution: chi2={statistic:.1f}, df={df}, "
            f"p={p_value:.2e}; observed {row.tolist()}, expected {(probs * n).tolist()}"
        )


def draw(
    target,
    drafter,
    n: int,
    seed_base: int,
    prompt: torch.Tensor = PROMPT,
    hybrid: bool = False,
    min_match: int | None = 1,
    **settings,
) -> tuple[torch.Tensor, dict[str, int]]:
    """`n` DLite-assisted samples (`hybrid`: with the suffix index, by default any match drafted; `min_match=None`:
    the drafter config's rule); returns counts `[3, V]` of tokens 1..3 and summed statistics."""
    P = prompt.shape[1]  # noqa: N806
    counts = torch.zeros(3, VOCAB)
    totals = {
        "drafted": 0,
        "accepted": 0,
        "calls_drafting_two": 0,
        "calls_skipping": 0,
        "lookup_rounds": 0,
        "fallback_rounds": 0,
    }
    for i in range(n):
        torch.manual_seed(seed_base + i)
        with DraftSession(min_match=min_match) if hybrid else contextlib.nullcontext():
            out = target.generate(
                prompt,
                max_new_tokens=MAX_NEW,
                do_sample=True,
                assistant_model=drafter,
                prompt_lookup_num_tokens=4 if hybrid else None,
                **settings,
            )
        assert out.shape[1] == P + MAX_NEW
        for position in range(3):
            counts[position, out[0, P + position]] += 1
        stats = drafter.last_generation_stats
        totals["drafted"] += stats.drafted
        totals["accepted"] += stats.accepted
        totals["calls_drafting_two"] += int(stats.drafted >= 2)
        totals["calls_skipping"] += int(stats.skipped > 0)
        totals["lookup_rounds"] += stats.lookup_rounds
        totals["fallback_rounds"] += stats.lookup_fallback_rounds
    return counts, totals


@pytest.mark.parametrize("setting", [*SETTINGS, *ADAPTIVE_SETTINGS])
def test_sampled_tokens_follow_the_target_distribution(peaked_pair, setting, monkeypatch):
    target, drafter = peaked_pair
    base, threshold, skip = ADAPTIVE_SETTINGS.get(setting, (setting, 0.0, 0.0))
    settings = SETTINGS[base]
    monkeypatch.setattr(drafter.config, "draft_confidence_threshold", threshold)
    monkeypatch.setattr(drafter.config, "draft_skip_threshold", skip)
    marginals = exact_marginals(target, **settings)

    # the drafter disagrees with the target enough for acceptance/rejection to matter
    with torch.no_grad():
        hidden = target(PROMPT, output_hidden_states=True).hidden_states
    context = torch.stack([hidden[i + 1][:, -1] for i in drafter.config.target_layer_ids], 1)
    _, draft_logits = drafter.draft(context, PROMPT[:, -1], num_tokens=1)
    q = _process(draft_logits[0, 0].double(), **settings).softmax(-1)
    assert 0.5 * (q - marginals[0]).abs().sum() > 0.3  # total variation between drafter and target at token 1

    counts, totals = draw(target, drafter, N_SAMPLES, seed_base=10_000, **settings)
    if threshold == 0:
        assert totals["calls_drafting_two"] == N_SAMPLES  # tokens 2 and 3 were drafted positions in every call
    else:  # the first round often drafted two, often stopped after one, and was sometimes skipped
        assert 0.2 * N_SAMPLES < totals["calls_drafting_two"] < 0.8 * N_SAMPLES, totals
        assert totals["calls_skipping"] > 0.05 * N_SAMPLES, totals
    acceptance = totals["accepted"] / totals["drafted"]
    assert 0.1 < acceptance < 0.9, acceptance  # both acceptances and residual resamples happened, often
    assert_follows(counts, marginals, setting)


@pytest.mark.parametrize("setting", ["t1", "t1_adaptive"])
def test_a_draft_vocabulary_samples_follow_the_target_distribution(peaked_pair, setting, monkeypatch):
    """With a draft vocabulary and no logits processor a round samples among its columns alone (`draft_tokens`
    stays on them and widens q on return). The tokens must still follow the target, those outside the columns too:
    q gives them 0, so only the residual resample can produce them."""
    target, base = peaked_pair
    drafter = copy.deepcopy(base).bind_target(target)
    counts_by_id = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(6)).float()
    columns = set_draft_vocab(drafter, counts_by_id, size=VOCAB // 2)
    _, threshold, skip = ADAPTIVE_SETTINGS.get(setting, (setting, 0.0, 0.0))
    monkeypatch.setattr(drafter.config, "draft_confidence_threshold", threshold)
    monkeypatch.setattr(drafter.config, "draft_skip_threshold", skip)
    settings = SETTINGS["t1"]
    marginals = exact_marginals(target, **settings)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[columns] = False
    assert float(marginals[1][outside].sum()) > 0.1  # the target often says what the drafter cannot draft

    counts, totals = draw(target, drafter, N_SAMPLES, seed_base=50_000, **settings)
    assert 0.1 < totals["accepted"] / totals["drafted"] < 0.9, totals
    assert_follows(counts, marginals, f"{setting}, {VOCAB // 2} draft ids")


def test_wrong_candidate_logits_are_detected(peaked_pair, monkeypatch):
    """Power: if the candidate logits are not those the drafts were sampled from, the same test rejects."""
    target, drafter = peaked_pair
    settings = SETTINGS["t1"]
    marginals = exact_marginals(target, **settings)
    honest = DLiteCandidateGenerator.get_candidates

    def uniform_candidate_logits(self, *args, **kwargs):
        candidate_ids, logits = honest(self, *args, **kwargs)
        return candidate_ids, None if logits is None else torch.zeros_like(logits)

    monkeypatch.setattr(DLiteCandidateGenerator, "get_candidates", uniform_candidate_logits)
    counts, _ = draw(target, drafter, N_POWER, seed_base=20_000, **settings)
    _, _, p_first = chi_square_test(counts[0], marginals[0])
    assert p_first > ALPHA  # the prefill token is untouched by the drafter ...
    for token in (2, 3):  # ... the drafted ones are biased, and the test sees it
        statistic, df, p_value = chi_square_test(counts[token - 1], marginals[token - 1])
        assert p_value < ALPHA, (token, statistic, df, p_value)


# ---------------------------------------------------------------------------------------------------------------------
# hybrid drafting: a retrieved draft is a proposal with q = one-hot
# ---------------------------------------------------------------------------------------------------------------------

# tokens 3, 7, 1, 12, 5 occur in the prompt: when the prefill samples one of them, the first round drafts what
# followed it (a lookup round); otherwise the drafter drafts (speculative sampling with its own q)
HYBRID_PROMPT = torch.tensor([[3, 7, 1, 12, 5, 3, 7, 12, 1, 5]])


def test_hybrid_sampling_follows_the_target_distribution(peaked_pair):
    target, drafter = peaked_pair
    settings = SETTINGS["t1"]
    marginals = exact_marginals(target, **settings, prompt=HYBRID_PROMPT)
    counts, totals = draw(target, drafter, N_SAMPLES, seed_base=30_000, prompt=HYBRID_PROMPT, hybrid=True, **settings)
    assert 0.1 * N_SAMPLES < totals["lookup_rounds"] < 0.9 * N_SAMPLES, totals  # both sources drafted, often
    assert_follows(counts, marginals, "hybrid")


def test_hybrid_fallback_sampling_follows_the_target_distribution(peaked_pair, monkeypatch):
    """`lookup_fallback_min_match`: where the drafter's sampled first draft is unlikely (it skips), a retrieved
    draft of any match is verified instead; the skip depends only on the drafter's own draws, so still lossless."""
    target, drafter = peaked_pair
    settings = SETTINGS["t1"]
    for name, value in (("draft_skip_threshold", 0.8), ("lookup_min_match", 10_000), ("lookup_fallback_min_match", 1)):
        monkeypatch.setattr(drafter.config, name, value)
    marginals = exact_marginals(target, **settings, prompt=HYBRID_PROMPT)
    counts, totals = draw(
        target, drafter, N_SAMPLES, seed_base=40_000, prompt=HYBRID_PROMPT, hybrid=True, min_match=None, **settings
    )
    assert totals["fallback_rounds"] == totals["lookup_rounds"], totals  # no match is long enough otherwise
    assert 0.05 * N_SAMPLES < totals["fallback_rounds"] < 0.95 * N_SAMPLES, totals
    assert_follows(counts, marginals, "hybrid-fallback")


def test_a_skip_that_looks_at_the_sampled_draft_is_detected(peaked_pair, monkeypatch):
    """Power: skipping a round when the *sampled* first draft is unlikely (instead of when the first position's top
    probability is) keeps only the drafts the drafter was sure of, so the proposal no longer follows q: biased.
    This was the skip rule before; the fallback setting above exposes it."""
    import dataclasses

    from dlite_hf.modeling import candidate_generators

    target, drafter = peaked_pair
    settings = SETTINGS["t1"]
    for name, value in (("draft_skip_threshold", 0.8), ("lookup_min_match", 10_000), ("lookup_fallback_min_match", 1)):
        monkeypatch.setattr(drafter.config, name, value)
    marginals = exact_marginals(target, **settings, prompt=HYBRID_PROMPT)
    honest = candidate_generators.draft_tokens  # what each generate() round runs

    def skip_on_the_sampled_draft(drafter, context, anchors, num_tokens, rules, **kwargs):
        tokens, logits = honest(
            drafter, context, anchors, num_tokens, dataclasses.replace(rules, skip_threshold=0.0), **kwargs
        )
        chosen = logits[:, 0].softmax(-1).gather(-1, tokens[:, :1])[:, 0]
        if bool((chosen < rules.skip_threshold).all()):
            return tokens[:, :0], logits[:, :0]
        return tokens, logits

    monkeypatch.setattr(candidate_generators, "draft_tokens", skip_on_the_sampled_draft)
    counts, _ = draw(
        target, drafter, N_SAMPLES, seed_base=40_000, prompt=HYBRID_PROMPT, hybrid=True, min_match=None, **settings
    )
    p_values = [chi_square_test(counts[token], marginals[token])[2] for token in (1, 2)]
    assert min(p_values) < ALPHA, p_values


def test_hybrid_with_a_wrong_proposal_distribution_is_detected(peaked_pair, monkeypatch):
    """Power: verifying a retrieved draft as if it were sampled from a uniform q (not one-hot) biases the tokens."""
    target, drafter = peaked_pair
    settings = SETTINGS["t1"]
    marginals = exact_marginals(target, **settings, prompt=HYBRID_PROMPT)
    honest = DLiteCandidateGenerator.get_candidates

    def uniform_q_for_lookup(self, *args, **kwargs):
        candidate_ids, logits = honest(self, *args, **kwargs)
        if self._source_now == "lookup":
            drafted = candidate_ids.shape[1] - args[0].shape[1]
            logits = torch.zeros(1, drafted, VOCAB)
        return candidate_ids, logits

    monkeypatch.setattr(DLiteCandidateGenerator, "get_candidates", uniform_q_for_lookup)
    counts, _ = draw(target, drafter, N_POWER, seed_base=40_000, prompt=HYBRID_PROMPT, hybrid=True, **settings)
    p_values = [chi_square_test(counts[token], marginals[token])[2] for token in (1, 2)]
    assert min(p_values) < ALPHA, p_values


# ---------------------------------------------------------------------------------------------------------------------
# bfloat16: the same tests with the target and the drafter in bfloat16
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_peaked_pair(peaked_pair):
    """The peaked_pair in bfloat16. The exact marginals come from the bfloat16 weights upcast to float64: what the
    bfloat16 target computes up to rounding, which 1,500 samples cannot resolve."""
    target, drafter = peaked_pair
    target = copy.deepcopy(target).to(torch.bfloat16)
    drafter = copy.deepcopy(drafter).to(torch.bfloat16)
    return target, drafter.bind_target(target)


@pytest.mark.parametrize("setting", [*SETTINGS, "hybrid"])
def test_bfloat16_sampling_follows_the_target_distribution(bf16_peaked_pair, setting):
    target, drafter = bf16_peaked_pair
    hybrid = setting == "hybrid"
    settings = SETTINGS["t1" if hybrid else setting]
    prompt = HYBRID_PROMPT if hybrid else PROMPT
    marginals = exact_marginals(copy.deepcopy(target).double(), **settings, prompt=prompt)
    counts, totals = draw(target, drafter, N_SAMPLES, seed_base=50_000, prompt=prompt, hybrid=hybrid, **settings)
    assert {p.dtype for p in drafter.parameters()} == {torch.bfloat16}
    acceptance = totals["accepted"] / totals["drafted"]
    assert 0.1 < acceptance < 0.9, acceptance
    if hybrid:
        assert 0.1 * N_SAMPLES < totals["lookup_rounds"] < 0.9 * N_SAMPLES, totals
    assert_follows(counts, marginals, f"bfloat16 {setting}")
