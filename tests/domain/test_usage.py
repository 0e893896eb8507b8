"""SPEC D1–D3: normalizing provider usage reports, summing a turn, estimating tokens."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordstream.domain.results import StreamResult
from cordstream.domain.usage import TokenUsage, estimate_tokens, normalize_usage, sum_turn_usage

# --- D1: shapes ------------------------------------------------------------------------------


def test_D1_openai_shape() -> None:
    raw = {"prompt_tokens": 12, "completion_tokens": 34, "total_tokens": 46}
    assert normalize_usage(raw) == TokenUsage(input_tokens=12, output_tokens=34)


def test_D1_openrouter_sdk_shape() -> None:
    raw = SimpleNamespace(promptTokens=7, completionTokens=9, totalTokens=16)
    assert normalize_usage(raw) == TokenUsage(7, 9)


def test_D1_anthropic_shape() -> None:
    assert normalize_usage({"input_tokens": 25, "output_tokens": 1}) == TokenUsage(25, 1)


def test_D1_anthropic_camel_case_shape() -> None:
    assert normalize_usage({"inputTokens": 3, "outputTokens": 4}) == TokenUsage(3, 4)


def test_D1_gemini_shape_counts_thoughts_as_output() -> None:
    raw = {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7}
    assert normalize_usage(raw) == TokenUsage(10, 12)


def test_D1_gemini_thoughts_without_candidates_are_output() -> None:
    raw = {"promptTokenCount": 10, "thoughtsTokenCount": 7}
    assert normalize_usage(raw) == TokenUsage(10, 7)


def test_D1_gemini_python_sdk_snake_case_shape() -> None:
    raw = SimpleNamespace(
        prompt_token_count=10, candidates_token_count=5, thoughts_token_count=None
    )
    assert normalize_usage(raw) == TokenUsage(10, 5)


def test_D1_attribute_object_like_an_sdk_model() -> None:
    @dataclass(frozen=True)
    class CompletionUsage:
        prompt_tokens: int
        completion_tokens: int

    assert normalize_usage(CompletionUsage(5, 6)) == TokenUsage(5, 6)


def test_D1_nested_under_usage_key() -> None:
    raw = {"id": "chatcmpl-1", "usage": {"prompt_tokens": 8, "completion_tokens": 2}}
    assert normalize_usage(raw) == TokenUsage(8, 2)


def test_D1_nested_under_usage_attribute() -> None:
    chunk = SimpleNamespace(choices=[], usage=SimpleNamespace(input_tokens=4, output_tokens=5))
    assert normalize_usage(chunk) == TokenUsage(4, 5)


def test_D1_gemini_usage_metadata_container_is_followed() -> None:
    raw = {"candidates": [], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}}
    assert normalize_usage(raw) == TokenUsage(3, 1)


def test_D1_valid_nested_result_wins_over_outer_fields() -> None:
    raw = {"prompt_tokens": 100, "completion_tokens": 100, "usage": {"input_tokens": 1}}
    assert normalize_usage(raw) == TokenUsage(1, 0)


def test_D1_invalid_nested_report_falls_back_to_outer_fields() -> None:
    raw = {"prompt_tokens": 5, "completion_tokens": 6, "usage": {"prompt_tokens": "n/a"}}
    assert normalize_usage(raw) == TokenUsage(5, 6)


def test_D1_anthropic_cache_tokens_are_added_to_input() -> None:
    raw = {
        "input_tokens": 3,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
        "output_tokens": 9,
    }
    assert normalize_usage(raw) == TokenUsage(1203, 9)


def test_D1_invalid_cache_tokens_are_skipped() -> None:
    raw = {"input_tokens": 3, "cache_read_input_tokens": None, "output_tokens": 9}
    assert normalize_usage(raw) == TokenUsage(3, 9)


def test_D1_cache_tokens_are_not_added_to_prompt_tokens_that_include_them() -> None:
    raw = {"prompt_tokens": 1200, "completion_tokens": 9, "cache_read_input_tokens": 1000}
    assert normalize_usage(raw) == TokenUsage(1200, 9)


# --- D2: validity ----------------------------------------------------------------------------


def test_D2_first_alias_with_a_valid_count_is_used() -> None:
    raw = {"prompt_tokens": "12", "promptTokens": 7, "input_tokens": 9, "completion_tokens": 1}
    assert normalize_usage(raw) == TokenUsage(7, 1)


def test_D2_a_valid_zero_is_the_sides_count() -> None:
    raw = {"prompt_tokens": 3, "completion_tokens": 0, "output_tokens": 5}
    assert normalize_usage(raw) == TokenUsage(3, 0)


def test_D2_integral_float_is_accepted() -> None:
    assert normalize_usage({"prompt_tokens": 10.0, "completion_tokens": 2.0}) == TokenUsage(10, 2)


@pytest.mark.parametrize(
    "invalid",
    [True, False, "10", math.nan, math.inf, -math.inf, -1, 1.5, -0.5, 2**53, 10**400, [4], b"4"],
    ids=repr,
)
def test_D2_invalid_counts_are_skipped(invalid: object) -> None:
    raw = {"prompt_tokens": invalid, "promptTokens": 4, "completion_tokens": 2}
    assert normalize_usage(raw) == TokenUsage(4, 2)


def test_D2_bool_and_nan_alone_are_no_usage() -> None:
    assert normalize_usage({"prompt_tokens": True, "completion_tokens": math.nan}) is None


def test_D2_no_positive_count_is_none() -> None:
    assert normalize_usage({"prompt_tokens": 0, "completion_tokens": 0}) is None


def test_D2_side_without_valid_count_is_zero_when_other_is_positive() -> None:
    assert normalize_usage({"completion_tokens": 5}) == TokenUsage(0, 5)


@pytest.mark.parametrize("raw", [None, 0, 17, 1.5, "usage", b"", [], {}, object()], ids=repr)
def test_D2_values_without_usage_are_none(raw: object) -> None:
    assert normalize_usage(raw) is None


def test_D2_huge_int_is_invalid_not_an_error() -> None:
    assert normalize_usage({"prompt_tokens": 10**5000, "completion_tokens": 1}) == TokenUsage(0, 1)


def test_D2_raising_attribute_access_is_no_usage() -> None:
    class Hostile:
        def __getattr__(self, name: str) -> object:
            raise RuntimeError(name)

    assert normalize_usage(Hostile()) is None


def test_D2_raising_property_skips_only_that_alias() -> None:
    class Partly:
        completion_tokens = 3

        @property
        def prompt_tokens(self) -> int:
            raise ValueError("not loaded")

        @property
        def input_tokens(self) -> int:
            return 8

    assert normalize_usage(Partly()) == TokenUsage(8, 3)


def test_D2_raising_mapping_is_no_usage() -> None:
    class Broken(Mapping[str, object]):
        def __getitem__(self, key: str) -> object:
            raise RuntimeError(key)

        def __iter__(self) -> Iterator[str]:
            raise RuntimeError("iter")

        def __len__(self) -> int:
            return 1

    assert normalize_usage(Broken()) is None


def test_D2_cyclic_usage_nesting_terminates() -> None:
    raw: dict[str, object] = {"prompt_tokens": 3}
    raw["usage"] = raw
    assert normalize_usage(raw) == TokenUsage(3, 0)


def test_D2_nesting_is_followed_four_levels_deep() -> None:
    raw: object = {"prompt_tokens": 2}
    for _ in range(4):
        raw = {"usage": raw}
    assert normalize_usage(raw) == TokenUsage(2, 0)


def test_D2_nesting_beyond_four_levels_is_not_followed() -> None:
    raw: object = {"prompt_tokens": 2}
    for _ in range(5):
        raw = {"usage": raw}
    assert normalize_usage(raw) is None


_JSON_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["prompt_tokens", "usage", "input_tokens"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "usage",
                    "usageMetadata",
                    "prompt_tokens",
                    "completion_tokens",
                    "promptTokens",
                    "completionTokens",
                    "input_tokens",
                    "output_tokens",
                    "inputTokens",
                    "outputTokens",
                    "promptTokenCount",
                    "candidatesTokenCount",
                    "thoughtsTokenCount",
                    "cache_read_input_tokens",
                    "other",
                ]
            ),
            children,
            max_size=6,
        )
        | st.dictionaries(st.text(max_size=3), children, max_size=3).map(
            lambda d: SimpleNamespace(**d)
        )
    ),
    max_leaves=30,
)


@given(_JSON_LIKE)
def test_D2_never_raises_and_only_returns_valid_usage(raw: object) -> None:
    usage = normalize_usage(raw)
    if usage is not None:
        assert usage.input_tokens >= 0
        assert usage.output_tokens >= 0
        assert usage.input_tokens > 0 or usage.output_tokens > 0


# --- D3: turns and the fallback estimate -----------------------------------------------------


def test_D3_sum_turn_usage_adds_segments() -> None:
    results = [
        StreamResult("function_call", usage=TokenUsage(100, 10)),
        StreamResult("completed", usage=TokenUsage(150, 40)),
    ]
    assert sum_turn_usage(results) == TokenUsage(250, 50)


def test_D3_sum_turn_usage_skips_segments_without_usage() -> None:
    results = [StreamResult("function_call"), StreamResult("completed", usage=TokenUsage(5, 6))]
    assert sum_turn_usage(results) == TokenUsage(5, 6)


def test_D3_sum_turn_usage_is_none_when_no_segment_reported() -> None:
    assert sum_turn_usage([StreamResult("completed"), StreamResult("error")]) is None


def test_D3_sum_turn_usage_of_no_segments_is_none() -> None:
    assert sum_turn_usage(iter(())) is None


@pytest.mark.parametrize(
    ("text", "expected"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)]
)
def test_D3_estimate_tokens_is_ceil_of_a_quarter_of_the_length(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def test_D3_estimate_tokens_counts_code_points() -> None:
    assert estimate_tokens("嗯😀\u00e9!") == 1


# --- D2: hostile values never raise and never cost the other side ------------------------------


class _NoClass:
    """`isinstance` on it raises: its `__class__` does."""

    @property  # type: ignore[misc]  # overriding __class__ with a property is the point
    def __class__(self) -> type:
        raise RuntimeError("no class")


class _BrokenCompare(int):
    def __ge__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    def __le__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")


def test_D2_a_report_whose_class_lookup_raises_is_no_usage() -> None:
    assert normalize_usage(_NoClass()) is None


def test_D2_a_count_whose_class_lookup_raises_loses_only_its_own_alias() -> None:
    raw = {"prompt_tokens": _NoClass(), "promptTokens": 5, "completion_tokens": 6}
    assert normalize_usage(raw) == TokenUsage(5, 6)


def test_D2_an_int_subclass_is_judged_as_the_plain_int_it_is() -> None:
    usage = normalize_usage({"prompt_tokens": _BrokenCompare(3), "completion_tokens": 4})
    assert usage == TokenUsage(3, 4)
    assert usage is not None
    assert type(usage.input_tokens) is int
    assert normalize_usage({"prompt_tokens": _BrokenCompare(-3), "completion_tokens": 4}) == (
        TokenUsage(0, 4)
    )


def test_D1_usage_as_an_object_with_only_one_providers_field_names() -> None:
    # An SDK's usage object has its own names and lacks the others: absent ones are skipped.
    assert normalize_usage(SimpleNamespace(prompt_tokens=3, completion_tokens=4)) == TokenUsage(
        3, 4
    )
    assert normalize_usage(SimpleNamespace(input_tokens=5, output_tokens=6)) == TokenUsage(5, 6)
