import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_sdk.scheduling import (
    H100_QWEN3_8B,
    BatchFeatures,
    BatchShape,
    LatencyModel,
    LatencyProfile,
    PiecewiseLinearTable,
    PrefillChunk,
    TokenOnlyModel,
    load_profile,
    save_profile,
)

TABLE = PiecewiseLinearTable(tokens=(8, 64, 512), ms=(1.0, 2.0, 9.0))


def causal_pairs_by_counting(new_tokens: int, prefix_tokens: int) -> int:
    # Query i (1-based) of the chunk attends to the prefix plus i chunk tokens (itself included).
    return sum(prefix_tokens + i for i in range(1, new_tokens + 1))


def test_table_hits_its_points_and_interpolates_linearly_between() -> None:
    for tokens, ms in zip(TABLE.tokens, TABLE.ms, strict=True):
        assert TABLE(tokens) == pytest.approx(ms)
    assert TABLE(36) == pytest.approx(1.5)  # halfway between 8 and 64
    assert TABLE(288) == pytest.approx(5.5)


def test_table_is_flat_below_first_point_and_extends_last_slope() -> None:
    assert TABLE(1) == pytest.approx(1.0)
    slope = (9.0 - 2.0) / (512 - 64)
    assert TABLE(1024) == pytest.approx(9.0 + slope * 512)
    assert TABLE(0) == 0.0


@pytest.mark.parametrize(
    ("tokens", "ms", "field"),
    [
        ((8, 8), (1.0, 2.0), "strictly increasing"),
        ((8, 16), (2.0, 1.0), "non-decreasing"),
        ((8,), (-1.0,), r"table\.ms\[0\]"),
        ((), (), "one or more"),
    ],
)
def test_bad_tables_are_rejected_naming_the_problem(tokens, ms, field) -> None:
    with pytest.raises(ValueError, match=field):
        PiecewiseLinearTable(tokens, ms)


def test_eq1_terms_match_counted_attention_pairs_and_decode_contexts() -> None:
    model = LatencyModel(H100_QWEN3_8B)
    batch = BatchShape(
        decode_contexts=(1000, 3000),
        prefill_chunks=(PrefillChunk(7, 100), PrefillChunk(3, 0)),
    )
    attention = causal_pairs_by_counting(7, 100) + causal_pairs_by_counting(3, 0)
    forward_tokens = 2 + 7 + 3
    expected = (
        model.gemm_ms(forward_tokens)
        + H100_QWEN3_8B.alpha_decode_ms * 4000
        + H100_QWEN3_8B.alpha_prefill_ms * attention
    )
    assert model.est_ms(batch) == pytest.approx(expected)
    assert PrefillChunk(7, 100).attention_units == causal_pairs_by_counting(7, 100)


def test_token_only_model_ignores_context_but_eq1_does_not() -> None:
    short = BatchShape((), (PrefillChunk(512, 0),))
    long = BatchShape((), (PrefillChunk(512, 16000),))
    token_only = TokenOnlyModel(H100_QWEN3_8B.gemm_table)
    assert token_only.est_ms(short) == token_only.est_ms(long)
    model = LatencyModel(H100_QWEN3_8B)
    assert model.est_ms(long) > model.est_ms(short) * 5


def test_empty_batch_costs_nothing() -> None:
    assert LatencyModel(H100_QWEN3_8B).est_ms(BatchShape()) == 0.0


@given(
    base=st.tuples(st.integers(0, 10_000), st.integers(0, 10**6), st.integers(0, 10**9)).map(
        lambda t: BatchFeatures(*t)
    ),
    new_tokens=st.integers(0, 10_000),
    prefix_tokens=st.integers(0, 100_000),
)
def test_features_add_and_remove_a_chunk_exactly(base, new_tokens, prefix_tokens) -> None:
    assert (
        base.with_chunk(new_tokens, prefix_tokens).without_chunk(new_tokens, prefix_tokens) == base
    )


@given(
    contexts=st.lists(st.integers(0, 40_000), max_size=8),
    chunks=st.lists(st.tuples(st.integers(0, 8000), st.integers(0, 40_000)), max_size=4),
    extra=st.integers(1, 4000),
)
def test_estimate_grows_with_more_prefill_tokens(contexts, chunks, extra) -> None:
    model = LatencyModel(H100_QWEN3_8B)
    base = BatchShape(tuple(contexts), tuple(PrefillChunk(q, p) for q, p in chunks))
    bigger = BatchShape(base.decode_contexts, (*base.prefill_chunks, PrefillChunk(extra, 0)))
    assert model.est_ms(bigger) >= model.est_ms(base)


def test_profile_round_trips_through_a_file(tmp_path) -> None:
    profile = LatencyProfile(
        name="test",
        gemm_table=TABLE,
        alpha_decode_ms=1e-4,
        alpha_prefill_ms=2e-6,
        token_only_table=PiecewiseLinearTable((8, 512), (1.0, 20.0)),
        metadata={"hardware": "cpu"},
    )
    path = save_profile(profile, tmp_path / "p.json")
    assert load_profile(path) == profile
    assert json.loads(path.read_text())["schema"] == "lookahead-sdk/latency-profile/v1"


def test_builtin_profile_loads_by_name() -> None:
    assert load_profile("h100-qwen3-8b") is H100_QWEN3_8B


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("alpha_prefill_ms"), "alpha_prefill_ms"),
        (lambda d: d.update(schema="other"), "profile.schema"),
        (lambda d: d.update(alpha_decode_ms=-1), "profile.alpha_decode_ms"),
        (lambda d: d.update(gemm_table_ms=[[1, 2, 3]]), r"gemm_table_ms\[0\]"),
    ],
)
def test_bad_profile_documents_name_the_field(mutate, message) -> None:
    document = H100_QWEN3_8B.to_json()
    mutate(document)
    with pytest.raises(ValueError, match=message):
        LatencyProfile.from_json(document)


def test_missing_profile_file_says_what_to_pass(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="h100-qwen3-8b"):
        load_profile(tmp_path / "absent.json")


def test_chunk_fields_are_validated() -> None:
    with pytest.raises(ValueError, match=r"PrefillChunk\.new_tokens"):
        PrefillChunk(-1, 0)
    with pytest.raises(TypeError, match=r"BatchShape\.decode_contexts"):
        BatchShape(decode_contexts=(1.5,))  # type: ignore[arg-type]
