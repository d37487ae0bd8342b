"""Binding a call's arguments to parameter names, fast.

``inspect.Signature.bind`` costs microseconds per call. A method event needs the
call's arguments by name, with defaults applied and made loggable, on every
signalled call, so each event method gets a *binder*: a function generated once
with the method's own parameter list (minus ``self``/``cls``) that returns its
arguments as a dict, each value's type checked. CPython's own call machinery does
the binding, defaults included; values of plain types (numbers, strings, None,
object references) are taken as they are, anything else goes through the
normalizer.

Only parameter names (identifiers taken from the signature) go into the generated
source; default values are attached afterwards through ``__defaults__`` and
``__kwdefaults__``, never rendered as text.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Binder", "CallShape", "call_shape", "make_binder"]

Binder = Callable[..., dict[str, Any]]
Normalizer = Callable[[Any, str], Any]

_P = inspect.Parameter


@dataclass(frozen=True, slots=True)
class CallShape:
    """A signature as source text, for functions generated to take the same
    arguments (the binder; the reactive layer's per-method wrapper).

    ``head`` is the parameter list without the first parameter when it was
    skipped, ``full_head`` with it; ``first`` names the skipped parameter (else
    ``None``). ``forward`` passes the parameters after the first on to a call
    (``price, *args, key=key, **kwargs``). ``values`` is a dict display of the
    bound values by name, each of a type not in ``plain`` normalized, excluded
    parameters left out; it reads the names in ``env``. ``items`` is the same
    values as a tuple display, in the order of ``keys``, their names (an
    occurrence's parameters as the detector stores them). ``defaults`` and
    ``kwdefaults`` go to the generated function's ``__defaults__`` and
    ``__kwdefaults__`` (of ``head``; ``full_defaults`` of ``full_head``).
    """

    head: str
    full_head: str
    first: str | None
    forward: str
    values: str
    items: str
    keys: tuple[str, ...]
    env: dict[str, Any]
    defaults: tuple[Any, ...] | None
    full_defaults: tuple[Any, ...] | None
    kwdefaults: dict[str, Any] | None
    names: frozenset[str]

    def compile(
        self, src: str, name: str, filename: str, extra: dict[str, Any] | None = None
    ) -> Any:
        """Run ``src`` with :attr:`env` (and ``extra``) as its globals; return
        the function it defines under ``name``."""
        namespace: dict[str, Any] = {}
        exec(compile(src, filename, "exec"), {**self.env, **(extra or {})}, namespace)
        return namespace[name]


def call_shape(
    signature: inspect.Signature,
    *,
    skip_first: bool,
    exclude: Iterable[str] = (),
    normalize: Normalizer | None = None,
    plain: frozenset[type] = frozenset(),
) -> CallShape:
    """The :class:`CallShape` of ``signature``. With ``normalize``, each value
    whose type is not in ``plain`` is replaced in :attr:`CallShape.values` by
    ``normalize(value, name)`` (which may raise); ``*args`` binds to a tuple and
    ``**kwargs`` to a dict under their own names."""
    params = list(signature.parameters.values())
    first = params[0].name if skip_first and params else None
    rest = params[1:] if skip_first else params
    skip = set(exclude)
    taken = {p.name for p in params}
    plain_name = _free("_plain", taken)
    norm_name = _free("_normalize", taken)
    type_name = _free("_type", taken)  # a parameter may be called ``type``
    head, defaults, kwdefaults = _head(rest)
    full_head, full_defaults, _ = _head(params)
    forward: list[str] = []
    values: list[str] = []
    items: list[str] = []
    keys: list[str] = []
    for p in rest:
        n = p.name
        if p.kind is _P.VAR_POSITIONAL:
            forward.append("*" + n)
        elif p.kind is _P.VAR_KEYWORD:
            forward.append("**" + n)
        elif p.kind is _P.KEYWORD_ONLY:
            forward.append(f"{n}={n}")
        else:
            forward.append(n)
        if n in skip:
            continue
        if normalize is None:
            value = n
        elif p.kind is _P.VAR_POSITIONAL:
            value = f"({norm_name}({n}, {n!r}) if {n} else {n})"
        elif p.kind is _P.VAR_KEYWORD:
            value = f"{norm_name}({n}, {n!r})"
        else:
            value = f"({n} if {type_name}({n}) in {plain_name} else {norm_name}({n}, {n!r}))"
        values.append(f"{n!r}: {value}")
        items.append(value)
        keys.append(n)
    return CallShape(
        head=head,
        full_head=full_head,
        first=first,
        forward=", ".join(forward),
        values="{" + ", ".join(values) + "}",
        items="(" + "".join(f"{v}, " for v in items) + ")",
        keys=tuple(keys),
        env={"__builtins__": {}, type_name: type, plain_name: plain, norm_name: normalize},
        defaults=defaults,
        full_defaults=full_defaults,
        kwdefaults=kwdefaults,
        names=frozenset(taken | {plain_name, norm_name, type_name}),
    )


def _head(
    params: list[inspect.Parameter],
) -> tuple[str, tuple[Any, ...] | None, dict[str, Any] | None]:
    """The parameter list ``params`` as source, with its defaults (attached as
    values afterwards, so any object works as a default)."""
    head: list[str] = []
    defaults: list[Any] = []
    kwdefaults: dict[str, Any] = {}
    seen_kwonly = False
    last_posonly = None
    for i, p in enumerate(params):
        if p.kind is _P.POSITIONAL_ONLY:
            last_posonly = i
    for i, p in enumerate(params):
        if p.kind is _P.VAR_POSITIONAL:
            head.append("*" + p.name)
            seen_kwonly = True
        elif p.kind is _P.VAR_KEYWORD:
            head.append("**" + p.name)
        elif p.kind is _P.KEYWORD_ONLY:
            if not seen_kwonly:
                head.append("*")
                seen_kwonly = True
            head.append(p.name)
            if p.default is not _P.empty:
                kwdefaults[p.name] = p.default
        else:
            head.append(p.name)
            if p.default is not _P.empty:
                defaults.append(p.default)
        if i == last_posonly:
            head.append("/")
    return ", ".join(head), tuple(defaults) or None, kwdefaults or None


def make_binder(shape: CallShape) -> Binder:
    """A function taking the arguments of ``shape``'s signature (without its
    first parameter when :func:`call_shape` skipped it) and returning
    ``{name: value}`` for every parameter not excluded, defaults applied,
    values normalized as :attr:`CallShape.values` says. ``*args`` binds to a
    tuple and ``**kwargs`` to a dict under their own names. Raises
    ``TypeError``, like the method would, when called with arguments that do not
    fit."""
    fn: Binder = shape.compile(
        f"def bind({shape.head}):\n    return {shape.values}\n", "bind", "<sentinel binder>"
    )
    fn.__defaults__ = shape.defaults
    fn.__kwdefaults__ = shape.kwdefaults
    return fn


def _free(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
