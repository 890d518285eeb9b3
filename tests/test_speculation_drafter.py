"""The n-gram drafter and the acceptance policy (engine.speculation), and who chooses
speculation (model.choice.speculation: flag > environment > setting > default)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbospark_app.engine.speculation import (
    AcceptancePolicy,
    LookupSpeculation,
    NgramIndex,
    expected_tokens,
)
from turbospark_app.model.choice.speculation import (
    DEFAULT_SPECULATION,
    SpeculationChoiceError,
    choose_speculation,
)

tokens = st.lists(st.integers(0, 5), min_size=0, max_size=60)


def brute_force(seq: list[int], n_min: int, n_max: int, k: int) -> tuple[int, ...]:
    """The longest trailing n-gram's LATEST earlier occurrence, and up to k tokens after it."""
    for n in range(n_max, n_min - 1, -1):
        if len(seq) < n:
            continue
        tail = seq[len(seq) - n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == tail:
                return tuple(seq[start + n:start + n + k])
    return ()


@settings(max_examples=300, deadline=None)
@given(tokens, st.integers(1, 3), st.integers(0, 2), st.integers(1, 8), st.integers(0, 60))
def test_lookup_equals_brute_force(seq: list[int], n_min: int, extra: int, k: int, split: int) -> None:
    index = NgramIndex(n_min, n_min + extra)
    index.extend(seq[:split])  # grown in two steps, as a reply grows
    index.sync(seq)
    assert index.tokens == seq
    assert index.lookup(k) == brute_force(seq, n_min, n_min + extra, k)


@settings(max_examples=200, deadline=None)
@given(tokens, st.integers(1, 8))
def test_a_draft_continues_an_earlier_occurrence(seq: list[int], k: int) -> None:
    index = NgramIndex(1, 3)
    index.extend(seq)
    draft = index.lookup(k)
    assert len(draft) <= k
    if draft:  # some earlier window (of >= 1 trailing tokens) is followed by the draft
        last = seq[-1]
        assert any(seq[i] == last and tuple(seq[i + 1:i + 1 + len(draft)]) == draft
                   for i in range(len(seq) - 1))


def test_no_match_no_draft() -> None:
    index = NgramIndex(2, 3)
    index.extend([1, 2, 3, 4, 5])
    assert index.lookup(7) == ()
    index.extend([1, 2])
    assert index.lookup(7) == (3, 4, 5, 1, 2)


def test_policy_grows_after_full_runs_and_drops_back_after_a_miss() -> None:
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=16)
    assert policy.cap == 7
    policy.settle(7, 7)
    assert policy.cap == 15
    policy.settle(15, 15)
    assert policy.cap == 31
    policy.settle(31, 31)
    assert policy.cap == 31
    policy.settle(31, 4)
    assert policy.cap == 7


def test_policy_stops_drafting_when_acceptance_stops_paying_and_probes_again() -> None:
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=4)
    assert policy.length(7) > 0  # the prior expects echo
    for _ in range(30):
        policy.settle(3, 0)  # every draft rejected
    assert policy.accept_rate < 0.05
    lengths = [policy.length(7) for _ in range(8)]
    # off, but a probe every 4th match, as long as a pass of about two steps: 1 + 0.2 k <= 2
    assert policy.row_cost == 0.2 and lengths == [0, 0, 0, 5, 0, 0, 0, 5]
    policy.row_cost = 0.8  # a CPU, where a row costs most of a step: a probe is one draft
    assert [policy.length(7) for _ in range(4)] == [0, 0, 0, 1]
    policy.row_cost = 0.05  # a GPU: the probe is the starting length
    assert [policy.length(7) for _ in range(4)] == [0, 0, 0, 7]
    policy.row_cost = 0.2
    for _ in range(20):
        policy.settle(7, 7)
    assert policy.length(7) == 7  # acceptance came back: full drafts again


def test_failed_probes_wait_longer_and_a_kept_token_brings_them_back() -> None:
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=4)
    policy.row_cost = 0.8
    for _ in range(30):
        policy.settle(3, 0)  # off: acceptance near 0

    def matches_until_probe() -> int:
        for n in range(1, 100):
            if policy.length(7):
                return n
        raise AssertionError("no probe in 100 matches")

    waits = []
    for _ in range(6):
        waits.append(matches_until_probe())
        policy.settle(1, 0)  # the probe kept nothing
    assert waits == [4, 8, 16, 32, 32, 32]  # doubled per failed probe, at most 8 x probe_every
    assert matches_until_probe() == 32
    policy.settle(1, 1)  # this probe's draft was kept
    assert matches_until_probe() == 4
    policy.settle(1, 0)
    assert matches_until_probe() == 8


def test_policy_length_maximises_expected_gain() -> None:
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=16)
    policy.accept_rate, policy.row_cost = 0.5, 0.2
    k = policy.length(31)
    gains = {j: expected_tokens(0.5, j + 1) / policy.cost(j + 1) for j in range(1, 8)}
    assert k == max(gains, key=gains.get) and gains[k] > 1
    assert policy.length(1) == 1  # fewer available than the best length: take them


def test_policy_learns_the_row_cost_from_timings() -> None:
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=16)
    for _ in range(40):
        policy.timed_step(0.010)
        policy.timed_pass(8, 0.010 * (1 + 0.5 * 7))
    assert policy.row_cost == pytest.approx(0.5, abs=0.02)


def test_the_row_cost_is_learnt_per_pass_size() -> None:
    from turbospark_app.engine.speculation import VerifyCost

    cost = VerifyCost(row_cost=0.5)
    assert cost.extra_row(2) == cost.extra_row(30) == 0.5  # nothing measured: the prior
    cost.timed_step(0.010)
    cost.timed_pass(2, 0.010 * 1.9)  # c = 0.9: a first pass of a size counts half
    assert cost.extra_row(2) == pytest.approx(0.7)
    for _ in range(60):
        cost.timed_step(0.010)
        cost.timed_pass(2, 0.010 * 1.76)  # this CPU's curve (default model): 0.76 at 2 rows,
        cost.timed_pass(8, 0.010 * (1 + 0.45 * 7))  # 0.45 at 8
    assert cost.extra_row(2) == pytest.approx(0.76, abs=0.01)
    assert cost.extra_row(7) == cost.extra_row(8) == pytest.approx(0.45, abs=0.01)  # class [6, 8]
    # not measured: the least of the prior, every size's figure and the nearest smaller class
    assert cost.extra_row(3) == 0.5
    assert cost.extra_row(12) == pytest.approx(0.45, abs=0.01)


def test_a_wider_pass_that_costs_less_per_row_is_chosen() -> None:
    from turbospark_app.engine.speculation import VerifyCost

    cost = VerifyCost(row_cost=0.5)
    curve = {2: 0.76, 3: 0.74, 4: 0.53, 6: 0.49, 9: 0.45, 17: 0.44}  # measured here, default model
    for _ in range(80):
        cost.timed_step(0.010)
        for rows, c in curve.items():
            cost.timed_pass(rows, 0.010 * (1 + c * (rows - 1)))
    policy = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=16, measured=cost)
    policy.accept_rate = 0.9
    gains = {k: expected_tokens(0.9, k + 1) / policy.cost(k + 1) for k in range(1, 8)}
    k = policy.length(7)
    assert k == max(gains, key=gains.get) == 5 and gains[5] > 1.3
    # one figure for every size (a short pass's) drafts 2, for a smaller gain
    flat = AcceptancePolicy(draft_start=7, draft_max=31, probe_every=16, measured=VerifyCost(row_cost=0.74))
    flat.accept_rate = 0.9
    assert flat.length(7) == 2 and expected_tokens(0.9, 3) / flat.cost(3) < 1.1
    policy.accept_rate = 0.6  # where little is accepted nothing pays, short or long
    assert policy.length(7) == 0


def test_crowded_means_no_draft() -> None:
    crowded = {"now": False}
    drafter = LookupSpeculation(ngram_min=1, crowded=lambda: crowded["now"]).start([1, 2, 3, 1, 2])
    assert drafter.propose([1, 2, 3, 1, 2], 10) == (3, 1, 2)
    crowded["now"] = True
    assert drafter.propose([1, 2, 3, 1, 2], 10) == ()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        LookupSpeculation(ngram_min=3, ngram_max=2)
    with pytest.raises(ValueError):
        LookupSpeculation(draft_start=0)


@pytest.mark.parametrize(
    ("flag", "env", "setting", "expected"),
    [
        ("lookup", "off", "off", ("lookup", "--speculation")),
        (None, "lookup", "off", ("lookup", "TURBOSPARK_SPECULATION")),
        (None, " LOOKUP ", None, ("lookup", "TURBOSPARK_SPECULATION")),
        (None, "", "lookup", ("lookup", "setting")),
        (None, None, "off", ("off", "setting")),
        (None, None, "bogus", (DEFAULT_SPECULATION, "default")),
        (None, None, None, (DEFAULT_SPECULATION, "default")),
    ],
)
def test_flag_beats_environment_beats_setting(flag, env, setting, expected) -> None:
    environ = {} if env is None else {"TURBOSPARK_SPECULATION": env}
    choice = choose_speculation(flag, setting, environ)
    assert (choice.mode, choice.source) == expected


def test_a_bad_environment_value_is_refused() -> None:
    with pytest.raises(SpeculationChoiceError, match="TURBOSPARK_SPECULATION"):
        choose_speculation(None, "lookup", {"TURBOSPARK_SPECULATION": "ngram"})
    with pytest.raises(SpeculationChoiceError, match="--speculation"):
        choose_speculation("fast", None, {})


def test_cli_flag_parses_for_chat_and_serve() -> None:
    from turbospark_app.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["chat", "--speculation", "lookup"]).speculation == "lookup"
    assert parser.parse_args(["serve", "--speculation", "off"]).speculation == "off"
    assert parser.parse_args(["--speculation", "lookup", "chat"]).speculation == "lookup"
    assert parser.parse_args(["chat"]).__dict__.get("speculation") is None
    with pytest.raises(SystemExit):
        parser.parse_args(["chat", "--speculation", "fast"])


def test_the_measured_pass_cost_is_shared_by_every_stream_of_a_backend() -> None:
    from turbospark_app.engine.speculation import VerifyCost

    shared = VerifyCost(row_cost=0.5)
    spec = LookupSpeculation(cost=shared)
    first = spec.start([1, 2, 3])
    first.policy.timed_step(0.010)
    for _ in range(40):  # passes of 5 rows cost 1.4 steps here: 0.1 of a step per extra row
        first.policy.timed_pass(5, 0.014)
    second = spec.start([4, 5, 6])  # a later turn starts from what the first measured
    assert second.policy.row_cost == pytest.approx(0.1, abs=0.02) and shared.passes == 40
    assert LookupSpeculation().start([1]).policy.row_cost == 0.2  # no shared cost: its own prior
