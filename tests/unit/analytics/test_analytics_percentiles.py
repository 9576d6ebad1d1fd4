"""The latency sketch's accuracy contract, bounds, merge and serialisation."""

from __future__ import annotations

import math
import random

import pytest

from turnstream.analytics.percentiles import LatencySketch, SketchParams

QUANTILES = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[rank - 1]


def _lognormal(rng: random.Random, n: int) -> list[float]:
    return [rng.lognormvariate(7.0, 1.5) for _ in range(n)]


def _uniform(rng: random.Random, n: int) -> list[float]:
    return [rng.uniform(0.0, 120_000.0) for _ in range(n)]


def _exponential(rng: random.Random, n: int) -> list[float]:
    return [rng.expovariate(1 / 2_500.0) for _ in range(n)]


def _bimodal(rng: random.Random, n: int) -> list[float]:
    return [
        rng.gauss(40.0, 5.0) if rng.random() < 0.7 else rng.gauss(30_000.0, 4_000.0)
        for _ in range(n)
    ]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_lognormal, id="lognormal"),
        pytest.param(_uniform, id="uniform"),
        pytest.param(_exponential, id="exponential"),
        pytest.param(_bimodal, id="bimodal"),
    ],
)
@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_sketch_quantiles_within_relative_accuracy(make, alpha):
    """Every estimate is within alpha of the true nearest-rank sample."""
    rng = random.Random(42)
    values = [max(v, 0.0) for v in make(rng, 20_000)]
    sketch = LatencySketch.of(values, SketchParams(relative_accuracy=alpha))
    for q in QUANTILES:
        true = nearest_rank(values, q)
        estimate = sketch.quantile(q)
        assert estimate is not None
        if true < sketch.params.min_value:
            assert estimate == 0.0
        else:
            assert abs(estimate - true) <= alpha * true * (1 + 1e-9), (
                q,
                true,
                estimate,
            )


def test_sketch_exact_statistics():
    """count, sum, min, max and mean are exact; q=0 and q=1 are min and max."""
    values = [3.0, 1_000.0, 17.5, 250.25, 99_999.0]
    sketch = LatencySketch.of(values)
    assert sketch.count == 5
    assert sketch.sum == pytest.approx(sum(values))
    assert sketch.min == 3.0
    assert sketch.max == 99_999.0
    assert sketch.quantile(0.0) == 3.0
    assert sketch.quantile(1.0) == 99_999.0
    assert sketch.mean() == pytest.approx(sum(values) / 5)


def test_sketch_small_and_negative_values_report_zero():
    """Samples under min_value (and negative clock skew) count as 0."""
    sketch = LatencySketch.of([-5.0, 0.0, 0.0005, 10.0])
    assert sketch.zero_count == 3
    assert sketch.min == 0.0
    assert sketch.quantile(0.5) == 0.0
    assert sketch.quantile(0.75) == 0.0
    estimate = sketch.quantile(0.99)
    assert estimate is not None
    assert abs(estimate - 10.0) <= 0.1


def test_sketch_empty_has_no_quantiles():
    """An empty sketch answers None."""
    sketch = LatencySketch()
    assert sketch.quantile(0.5) is None
    assert sketch.mean() is None


def test_sketch_memory_is_bounded_by_the_value_range():
    """Bucket count never exceeds the geometry's bound, however many samples."""
    rng = random.Random(7)
    params = SketchParams()
    sketch = LatencySketch(params=params)
    for _ in range(50_000):
        sketch.add(10 ** rng.uniform(-4, 14))  # beyond both ends of the range
    assert len(sketch.buckets) <= params.max_buckets()
    assert params.max_buckets() < 1_800
    assert sketch.max is not None
    assert sketch.max > params.max_value  # the exact max survives clamping


def test_sketch_merge_is_exact():
    """Merging sketches equals sketching the concatenation."""
    rng = random.Random(3)
    a_values = _lognormal(rng, 3_000)
    b_values = _exponential(rng, 5_000)
    merged = LatencySketch.of(a_values)
    merged.merge(LatencySketch.of(b_values))
    whole = LatencySketch.of(a_values + b_values)
    assert merged.buckets == whole.buckets
    assert merged.count == whole.count
    assert merged.min == whole.min
    assert merged.max == whole.max
    for q in QUANTILES:
        assert merged.quantile(q) == whole.quantile(q)


def test_sketch_merge_rejects_other_geometry():
    """Sketches with different parameters cannot be merged."""
    a = LatencySketch.of([1.0])
    b = LatencySketch.of([1.0], SketchParams(relative_accuracy=0.02))
    with pytest.raises(ValueError, match="different parameters"):
        a.merge(b)


def test_sketch_round_trips_through_dict():
    """to_dict/from_dict preserve everything."""
    sketch = LatencySketch.of([0.0, 1.5, 20.0, 20.1, 5_000.0])
    again = LatencySketch.from_dict(sketch.to_dict())
    assert again == sketch


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"alpha": 0.01}, id="missing-keys"),
        pytest.param(
            {
                "alpha": 0.01,
                "lo": 0.001,
                "hi": 1e12,
                "b": [[1, 2]],
                "z": 0,
                "n": 5,
                "s": 1.0,
                "min": 1.0,
                "max": 1.0,
            },
            id="counts-disagree",
        ),
    ],
)
def test_sketch_rejects_malformed_dict(broken):
    """A malformed stored sketch is a ValueError, not a silent wrong answer."""
    with pytest.raises(ValueError, match="malformed"):
        LatencySketch.from_dict(broken)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"relative_accuracy": 0.0}, id="alpha-zero"),
        pytest.param({"relative_accuracy": 1.0}, id="alpha-one"),
        pytest.param({"min_value": 5.0, "max_value": 1.0}, id="range-inverted"),
    ],
)
def test_sketch_params_validated(kwargs):
    """Nonsensical geometry is refused."""
    with pytest.raises(ValueError, match=r"must|need"):
        SketchParams(**kwargs)


def test_sketch_quantile_rejects_out_of_range_q():
    """q outside [0, 1] is an error."""
    with pytest.raises(ValueError, match="q must be"):
        LatencySketch.of([1.0]).quantile(1.5)
