"""A bounded, mergeable latency sketch with a relative-error guarantee.

Owns :class:`LatencySketch`: a log-bucketed histogram in the style of
DDSketch. Pure: stdlib only; must not import faust, fastavro, aiokafka or any
other turnstream module.

Accuracy contract (pinned by ``tests/unit/analytics/test_percentiles.py``):

* ``quantile(q)`` returns an estimate ``e`` of the *nearest-rank* sample
  ``x`` (the ``ceil(q * n)``-th smallest of the ``n`` recorded values) with
  ``|e - x| <= relative_accuracy * x`` for every ``x >= min_value``; a sample
  below ``min_value`` (1 µs by default, latencies are in milliseconds) is
  reported as ``0`` -- an absolute error under ``min_value``.
* ``count``, ``sum``, ``min`` and ``max`` are exact, and ``quantile(1.0)`` is
  the exact maximum.
* Memory is bounded by the bucket range, not by the number of samples: with
  the defaults (1 % relative accuracy, 1 µs .. 10^12 ms) there are at most
  about 1,750 buckets, and a typical latency distribution uses a few dozen.
  Values above ``max_value`` are clamped into the top bucket (the exact
  ``max`` still reports them).

Two sketches with the same parameters merge exactly (bucket counts add), so
per-loop sketches roll up into per-window and total percentiles without
losing the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_VALUE",
    "DEFAULT_MIN_VALUE",
    "DEFAULT_RELATIVE_ACCURACY",
    "LatencySketch",
    "SketchParams",
]

DEFAULT_RELATIVE_ACCURACY: Final = 0.01
DEFAULT_MIN_VALUE: Final = 1e-3
"""1 µs, in milliseconds: smaller samples are reported as 0."""
DEFAULT_MAX_VALUE: Final = 1e12
"""About 31 years, in milliseconds: larger samples are clamped into the top bucket."""


@dataclass(frozen=True, slots=True)
class SketchParams:
    """The bucket geometry shared by every sketch that may be merged.

    Attributes:
        relative_accuracy: the guaranteed relative error ``alpha`` (0 < alpha < 1).
        min_value: the smallest value given its own bucket.
        max_value: values above it share the top bucket.
    """

    relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY
    min_value: float = DEFAULT_MIN_VALUE
    max_value: float = DEFAULT_MAX_VALUE

    def __post_init__(self) -> None:
        if not 0.0 < self.relative_accuracy < 1.0:
            raise ValueError("relative_accuracy must be in (0, 1)")
        if not 0.0 < self.min_value < self.max_value:
            raise ValueError("need 0 < min_value < max_value")

    @property
    def gamma(self) -> float:
        """The ratio between consecutive bucket bounds."""
        alpha = self.relative_accuracy
        return (1.0 + alpha) / (1.0 - alpha)

    def max_buckets(self) -> int:
        """Upper bound on the number of non-zero buckets (plus the zero bucket)."""
        log_gamma = math.log(self.gamma)
        top = math.ceil(math.log(self.max_value) / log_gamma)
        bottom = math.ceil(math.log(self.min_value) / log_gamma)
        return top - bottom + 2


@dataclass(slots=True)
class LatencySketch:
    """Log-bucketed histogram of non-negative values (milliseconds).

    Bucket ``i`` holds values in ``(gamma**(i-1), gamma**i]`` and reports
    ``2 * gamma**i / (gamma + 1)``, whose relative distance to any value of the
    bucket is at most ``relative_accuracy``. ``zero_count`` holds values below
    ``min_value`` (including negative values, which are clamped to 0).

    Attributes:
        params: the bucket geometry.
        buckets: sparse bucket index -> count.
        zero_count: samples below ``min_value``.
        count: all samples.
        sum: exact sum of the (clamped) samples.
        min: exact smallest sample, or ``None`` when empty.
        max: exact largest sample, or ``None`` when empty.
    """

    params: SketchParams = field(default_factory=SketchParams)
    buckets: dict[int, int] = field(default_factory=dict)
    zero_count: int = 0
    count: int = 0
    sum: float = 0.0
    min: float | None = None
    max: float | None = None

    # -- recording -----------------------------------------------------------

    def add(self, value: float) -> None:
        """Record one sample; negative values (clock skew) count as 0."""
        value = max(value, 0.0)
        self.count += 1
        self.sum += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)
        if value < self.params.min_value:
            self.zero_count += 1
            return
        index = self._index(min(value, self.params.max_value))
        self.buckets[index] = self.buckets.get(index, 0) + 1

    def merge(self, other: LatencySketch) -> None:
        """Add ``other``'s samples to this sketch (exact).

        Raises:
            ValueError: the sketches have different bucket geometry.
        """
        if other.params != self.params:
            raise ValueError("cannot merge sketches with different parameters")
        if other.count == 0:
            return
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.zero_count += other.zero_count
        self.count += other.count
        self.sum += other.sum
        self.min = other.min if self.min is None else _min(self.min, other.min)
        self.max = other.max if self.max is None else _max(self.max, other.max)

    # -- reading -------------------------------------------------------------

    def quantile(self, q: float) -> float | None:
        """The estimated nearest-rank ``q``-quantile, or ``None`` when empty.

        Args:
            q: the quantile in ``[0, 1]``; 0 gives the exact minimum and 1 the
                exact maximum.

        Raises:
            ValueError: ``q`` is outside ``[0, 1]``.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be in [0, 1]")
        if self.count == 0 or self.min is None or self.max is None:
            return None
        if q == 0.0:
            return self.min
        if q == 1.0:
            return self.max
        rank = max(1, math.ceil(q * self.count - 1e-9))
        if rank <= self.zero_count:
            return 0.0
        seen = self.zero_count
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return min(max(self._value(index), self.min), self.max)
        return self.max  # unreachable while counts are consistent

    def mean(self) -> float | None:
        """The exact mean, or ``None`` when empty."""
        return self.sum / self.count if self.count else None

    # -- serialisation ---------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible form (bucket pairs sorted by index)."""
        return {
            "alpha": self.params.relative_accuracy,
            "lo": self.params.min_value,
            "hi": self.params.max_value,
            "b": [[i, self.buckets[i]] for i in sorted(self.buckets)],
            "z": self.zero_count,
            "n": self.count,
            "s": self.sum,
            "min": self.min,
            "max": self.max,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencySketch:
        """Rebuild a sketch from :meth:`to_dict` output.

        Raises:
            ValueError: ``data`` is not a well-formed sketch.
        """
        try:
            params = SketchParams(
                relative_accuracy=float(data["alpha"]),
                min_value=float(data["lo"]),
                max_value=float(data["hi"]),
            )
            buckets = {int(i): int(n) for i, n in data["b"]}
            sketch = cls(
                params=params,
                buckets=buckets,
                zero_count=int(data["z"]),
                count=int(data["n"]),
                sum=float(data["s"]),
                min=None if data["min"] is None else float(data["min"]),
                max=None if data["max"] is None else float(data["max"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed latency sketch: {exc!r}") from exc
        if sketch.zero_count + sum(buckets.values()) != sketch.count:
            raise ValueError("malformed latency sketch: counts disagree")
        return sketch

    @classmethod
    def of(
        cls, values: Iterable[float], params: SketchParams | None = None
    ) -> LatencySketch:
        """A sketch holding ``values``."""
        sketch = cls(params=params or SketchParams())
        for value in values:
            sketch.add(value)
        return sketch

    def bucket_value(self, index: int) -> float:
        """The value bucket ``index`` reports."""
        return self._value(index)

    # -- geometry --------------------------------------------------------------

    def _index(self, value: float) -> int:
        return math.ceil(math.log(value) / math.log(self.params.gamma))

    def _value(self, index: int) -> float:
        gamma = self.params.gamma
        return 2.0 * gamma**index / (gamma + 1.0)


def _min(a: float, b: float | None) -> float:
    return a if b is None else min(a, b)


def _max(a: float, b: float | None) -> float:
    return a if b is None else max(a, b)
