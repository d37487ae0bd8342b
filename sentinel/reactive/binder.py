"""Binding a call's arguments to parameter names, fast.

``inspect.Signature.bind`` costs microseconds per call. A method event needs the
call's arguments by name, with defaults applied and made loggable, on every
signalled call, so each event method gets a *binder*: a function generated once
with the method's own parameter list (minus ``self``/``cls``) whose body checks each
value's type and returns its locals as a dict. CPython's own call machinery does
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
from typing import Any

__all__ = ["Binder", "make_binder"]

Binder = Callable[..., dict[str, Any]]
Normalizer = Callable[[Any, str], Any]

_P = inspect.Parameter


def make_binder(
    signature: inspect.Signature,
    *,
    skip_first: bool,
    exclude: Iterable[str] = (),
    normalize: Normalizer | None = None,
    plain: frozenset[type] = frozenset(),
) -> Binder:
    """A function taking the same arguments as ``signature`` (without its first
    parameter when ``skip_first``) and returning ``{name: value}`` for every
    parameter not in ``exclude``, defaults applied. ``*args`` binds to a tuple and
    ``**kwargs`` to a dict under their own names.

    With ``normalize``, each value whose type is not in ``plain`` is replaced by
    ``normalize(value, name)`` (which may raise). Raises ``TypeError``, like the
    method would, when called with arguments that do not fit.
    """
    params = list(signature.parameters.values())
    if skip_first:
        params = params[1:]
    skip = set(exclude)
    taken = {p.name for p in params}
    plain_name = _free("_plain", taken)
    norm_name = _free("_normalize", taken)
    type_name = _free("_type", taken)  # a parameter may be called ``type``
    head: list[str] = []
    checks: list[str] = []
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
        if normalize is not None and p.name not in skip:
            n = p.name
            if p.kind is _P.VAR_POSITIONAL:
                checks.append(f"    if {n}: {n} = {norm_name}({n}, {n!r})")
            elif p.kind is _P.VAR_KEYWORD:
                checks.append(f"    {n} = {norm_name}({n}, {n!r})")
            else:
                checks.append(
                    f"    if {type_name}({n}) not in {plain_name}: {n} = {norm_name}({n}, {n!r})"
                )
    body = ", ".join(f"{p.name!r}: {p.name}" for p in params if p.name not in skip)
    src = "def bind({}):\n{}    return {{{}}}\n".format(
        ", ".join(head), "".join(c + "\n" for c in checks), body
    )
    namespace: dict[str, Any] = {}
    env = {"__builtins__": {}, type_name: type, plain_name: plain, norm_name: normalize}
    exec(compile(src, "<sentinel binder>", "exec"), env, namespace)
    fn: Binder = namespace["bind"]
    # Defaults are attached as values, so any object works as a default.
    fn.__defaults__ = tuple(defaults) or None
    fn.__kwdefaults__ = kwdefaults or None
    return fn


def _free(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name
