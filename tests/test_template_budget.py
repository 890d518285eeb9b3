"""Template rendering has a budget (steps, time, output length): no template outlasts Stop."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turbospark_app.model.text.chat_template import (
    RenderBudget,
    ChatTemplate,
    TemplateBudgetExceeded,
    TemplateError,
)

USER_HI = [{"role": "user", "content": "Hi"}]
NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"
OUTPUT_BOMB = "{% for i in range(100000) %}{% for j in range(100000) %}aaaaaaaa{% endfor %}{% endfor %}"
STRING_BOMB = "{{ 'a' * 1000000000 }}"
LIST_BOMB = "{{ ([1] * 100000000) | length }}"
RECURSION = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"


@pytest.mark.parametrize("source", [NESTED_LOOPS, OUTPUT_BOMB, STRING_BOMB, LIST_BOMB, RECURSION])
def test_runaway_templates_stop_within_the_budget(source: str) -> None:
    template = ChatTemplate(source)
    start = time.monotonic()
    with pytest.raises(TemplateError) as info:
        template.render(USER_HI)
    assert time.monotonic() - start < template.budget.seconds + 1.0
    assert isinstance(info.value, TemplateBudgetExceeded) or "recursion" in str(info.value)


def test_the_budget_names_what_ran_out() -> None:
    with pytest.raises(TemplateBudgetExceeded, match="steps"):
        ChatTemplate(NESTED_LOOPS, budget=RenderBudget(steps=10_000, seconds=30.0)).render(USER_HI)
    with pytest.raises(TemplateBudgetExceeded, match="characters"):
        ChatTemplate(OUTPUT_BOMB, budget=RenderBudget(max_chars=1000)).render(USER_HI)
    with pytest.raises(TemplateBudgetExceeded, match="seconds"):
        ChatTemplate(NESTED_LOOPS, budget=RenderBudget(steps=10**12, seconds=0.2)).render(USER_HI)


def test_a_cancel_predicate_stops_a_render() -> None:
    asked = []

    def cancel() -> bool:
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(TemplateBudgetExceeded, match="stopped"):
        ChatTemplate(NESTED_LOOPS).render(USER_HI, cancel=cancel)


def test_ordinary_templates_render_within_the_budget() -> None:
    many = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 50} for i in range(201)]
    text = ChatTemplate(None).render(many)
    assert text.count("<|im_start|>") == 202


_PIECES = st.sampled_from([
    "{% for i in range(N) %}", "{% endfor %}", "{{ 'ab' * N }}", "{{ i }}", "x", "{{ messages|length }}",
    "{% if loop is defined %}y{% endif %}", "{% set s = 'q' * N %}", "{{ s }}",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, min_size=1, max_size=8), st.sampled_from([1, 10, 1000, 100000]))
def test_fuzzed_templates_end_within_the_budget(pieces: list[str], n: int) -> None:
    source = "".join(pieces).replace("N", str(n))
    opens = source.count("{% for")
    source += "{% endfor %}" * max(0, opens - source.count("{% endfor"))
    budget = RenderBudget(steps=200_000, seconds=1.0, max_chars=200_000)
    try:
        template = ChatTemplate(source, budget=budget)
    except TemplateError:
        return  # does not compile: refused, fine
    start = time.monotonic()
    try:
        text = template.render(USER_HI)
    except TemplateError:
        pass
    else:
        assert len(text) <= budget.max_chars
    assert time.monotonic() - start < budget.seconds + 1.0
