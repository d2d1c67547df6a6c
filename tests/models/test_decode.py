"""The sampler: counter-based draws follow the processed distribution, per row, independently."""

from __future__ import annotations

import torch

from trajkit.models.decode import Modes, Row, row_seed, sample, seed_state, uniforms

LOGITS = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5])


def draw(rows: int, temperature: float, top_p: float, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    states = torch.tensor([seed_state(row_seed(7, i)) for i in range(rows)])
    u = uniforms(states, step + 1)[:, step]
    modes = Modes.of([Row((1,), 1, temperature, top_p)])
    t = torch.full((rows,), temperature)
    p = torch.full((rows,), top_p)
    return sample(LOGITS.expand(rows, -1), t, p, u, modes)


def test_draws_follow_the_tempered_distribution():
    tokens, logprobs = draw(20_000, temperature=0.7, top_p=1.0)
    expected = torch.softmax(LOGITS / 0.7, -1)
    observed = torch.bincount(tokens, minlength=5).float() / len(tokens)
    assert (observed - expected).abs().max() < 0.015
    assert torch.allclose(logprobs, expected.log()[tokens], atol=1e-5)


def test_top_p_keeps_the_nucleus_and_renormalizes():
    tokens, logprobs = draw(20_000, temperature=1.0, top_p=0.8)
    probs = torch.softmax(LOGITS, -1)  # sorted: token 3 (0.61), 2 (0.22), 1 (0.08), ...: 0.8 is reached with 3 and 2
    nucleus = torch.tensor([3, 2])
    assert set(tokens.tolist()) == set(nucleus.tolist())
    renormalized = probs[nucleus] / probs[nucleus].sum()
    observed = torch.stack([(tokens == k).float().mean() for k in nucleus])
    assert (observed - renormalized).abs().max() < 0.015
    assert torch.allclose(logprobs, renormalized.log()[[nucleus.tolist().index(t) for t in tokens.tolist()]], atol=1e-5)


def test_draws_are_fixed_by_seed_and_step_and_vary_otherwise():
    states = torch.tensor([seed_state(row_seed(1, 0)), seed_state(row_seed(1, 1)), seed_state(row_seed(2, 0))])
    table = uniforms(states, 64)
    assert torch.equal(table, uniforms(states, 64))
    assert torch.equal(uniforms(states[1:2], 64)[0], table[1])  # a row's draws do not depend on its neighbours
    assert len({round(x, 6) for x in table.flatten().tolist()}) == table.numel()
    assert 0 < table.min() and table.max() < 1 and abs(table.mean().item() - 0.5) < 0.06
    assert row_seed(None, 0) != row_seed(None, 0)


def test_greedy_rows_take_the_argmax_next_to_sampled_rows():
    logits = LOGITS.expand(4, -1)
    temperature = torch.tensor([0.0, 1.0, 0.0, 1.0])
    u = torch.tensor([0.01, 0.01, 0.99, 0.99])
    modes = Modes(all_greedy=False, any_greedy=True, nucleus=False)
    tokens, logprobs = sample(logits, temperature, torch.ones(4), u, modes)
    assert tokens[0] == tokens[2] == 3 and tokens[1] == 0 and tokens[3] == 4
    assert torch.allclose(logprobs[[0, 2]], torch.log_softmax(LOGITS, -1)[3])
