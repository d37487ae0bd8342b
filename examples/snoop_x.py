"""The Snoop paper's running example, detected in every parameter context.

X = (E1 ^ E2) ; E3 ; (E2 ^ E4) over the history
H = e1^1 e1^2 e2^1 e3^1 e2^2 e4^1 e3^2 e4^2 (Chakravarthy et al. 1995, 2.2-2.3).

Run with ``python -m examples.snoop_x``.
"""

from __future__ import annotations

from sentinel import Context, LocalEventDetector

X = "(E1 ^ E2) ; E3 ; (E2 ^ E4)"
H = ["E1", "E1", "E2", "E3", "E2", "E4", "E3", "E4"]


def detect(context: Context) -> list[tuple[str, str]]:
    """Signal H on a fresh detector; return (instant, detection) pairs in paper
    notation."""
    det = LocalEventDetector()
    for name in ("E1", "E2", "E3", "E4"):
        det.explicit(name)
    labels: dict[int, str] = {}
    found: list[tuple[str, str]] = []

    def record(occ):  # type: ignore[no-untyped-def]
        inside = ", ".join(labels[c.t_occ] for c in occ.constituents)
        found.append((labels[occ.t_occ], "{" + inside + "}"))

    det.rule("X", X, action=record, context=context)
    counts: dict[str, int] = {}
    for name in H:
        counts[name] = counts.get(name, 0) + 1
        # Rules run before signal() returns, so label the occurrence beforehand.
        labels[det.clock + 1] = f"e{name[1]}^{counts[name]}"
        det.signal(name)
    return found


def main() -> None:
    print(f"X = {X}")
    print("H = " + " ".join(f"e{n[1]}" for n in H) + "   (superscripts count each event)\n")
    for context in Context:
        found = detect(context)
        print(f"{context.value:>12}: {len(found)} detection(s)")
        for at, detection in found:
            print(f"{'':>14}at {at}: {detection}")
    print("\nThe unrestricted context is every combination the definitions allow (2.2.1);")
    print("see docs/semantics.md for where the paper's printed lists differ and why.")


if __name__ == "__main__":
    main()
