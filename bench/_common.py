"""What every benchmark in ``bench/`` shares: interleaved rounds, medians, ranges.

A benchmark names its variants (sentinel's and the baselines'), each a function
that runs once and returns ``(items, seconds)``. :func:`interleaved` runs them
round by round, every variant once per round, rotating the order of each round
so that no variant always runs first (after a collection) or last; the figures
of one variant are then summarised by their median and range, and a ratio of two
variants is taken round by round (both measured in the same round, so on the same
machine at the same moment) before its median and range.
"""

from __future__ import annotations

import gc
import platform
import statistics
import sys
from collections.abc import Callable, Sequence

Run = Callable[[], tuple[int, float]]


def interleaved(variants: dict[str, Run], rounds: int) -> dict[str, list[float]]:
    """Rates (items per second) of each variant, one per round; rounds interleave
    the variants, the first variant of a round moving by one each round."""
    names = list(variants)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            items, seconds = variants[name]()
            rates[name].append(items / seconds)
    return rates


def ratios(top: Sequence[float], bottom: Sequence[float]) -> list[float]:
    """Round-by-round ratios of two variants' figures."""
    return [a / b for a, b in zip(top, bottom, strict=True)]


def median_range(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``median (low - high)`` of ``values`` in ``fmt``."""
    med = statistics.median(values)
    return f"{med:{fmt}} ({min(values):{fmt}} - {max(values):{fmt}})"


def machine() -> str:
    """What the figures were measured on: the machine, its load and the Python."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return (
        f"{cpu}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
