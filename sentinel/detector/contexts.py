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
import typing as t

from sentinel.errors import RuleDefinitionError

__all__ = ["Choice", "Context"]


class Choice(enum.Enum):
    """A choice a rule or a subscription makes once, given as a member or by
    name: :class:`Context` here, the rules layer's coupling and trigger modes.
    A subclass says what it is called in errors: ``class Context(Choice,
    what="parameter context")``; it prints as its value."""

    _what: t.ClassVar[str]

    def __init_subclass__(cls, what: str = "", **kwargs: t.Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._what = what

    @classmethod
    def parse(cls, value: t.Self | str) -> t.Self:
        """``value`` as a member; strings are matched case-insensitively, with
        ``-`` and spaces read as ``_``.

        Raises :class:`~sentinel.errors.RuleDefinitionError` naming the valid
        values for anything else.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower().replace("-", "_").replace(" ", "_"))
            except ValueError:
                pass
        valid = ", ".join(c.value for c in cls)
        raise RuleDefinitionError(f"unknown {cls._what} {value!r}; expected one of {valid}")

    def __str__(self) -> str:
        return str(self.value)


class Context(Choice, what="parameter context"):
    """A parameter context. ``Context.parse("chronicle")`` accepts names too."""

    RECENT = "recent"
    CHRONICLE = "chronicle"
    CONTINUOUS = "continuous"
    CUMULATIVE = "cumulative"
    UNRESTRICTED = "unrestricted"
