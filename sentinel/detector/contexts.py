"""Parameter contexts (Snoop 2.3.1) and the other choices a subscription makes once.

A parameter context decides which occurrences of the constituent events combine
into a detection, through the roles of *initiator* (an occurrence that starts a
detection) and *terminator* (one that completes it):

RECENT
    only the most recent initiator is used; it keeps initiating until a newer one
    replaces it. Least storage. The default.
CHRONICLE
    initiators and terminators pair in chronological order, oldest with oldest;
    each is used once.
CONTINUOUS
    every initiator starts a detection; one terminator completes all pending ones
    (several detections at one instant); initiators are consumed.
CUMULATIVE
    all initiators so far are combined into one detection with the terminator,
    then discarded.
UNRESTRICTED
    every combination the definitions of 2.2.1 allow; nothing is ever consumed.
    Storage grows without bound: for batch analysis of bounded histories only.

The algorithms per operator and context live in ``sentinel.detector.operators``.
"""

from __future__ import annotations

import enum

from sentinel.errors import RuleDefinitionError

__all__ = ["Context"]


class Context(enum.Enum):
    """A parameter context. ``Context.parse("chronicle")`` accepts names too."""

    RECENT = "recent"
    CHRONICLE = "chronicle"
    CONTINUOUS = "continuous"
    CUMULATIVE = "cumulative"
    UNRESTRICTED = "unrestricted"

    @classmethod
    def parse(cls, value: Context | str) -> Context:
        """``value`` as a Context; strings are matched case-insensitively.

        Raises :class:`~sentinel.errors.RuleDefinitionError` naming the valid
        contexts for anything else.
        """
        if isinstance(value, Context):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        valid = ", ".join(c.value for c in cls)
        raise RuleDefinitionError(f"unknown parameter context {value!r}; expected one of {valid}")

    def __str__(self) -> str:
        return self.value
