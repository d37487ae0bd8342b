"""The per-call wrapper installed on an event method while something listens.

A call through it, in order:

1. A call that is not the object's own method call passes straight through: a
   ``super()`` call (or ``Base.method(obj)``) from an override runs inside the
   override's call, which signals for it, so one call of ``obj.set_price`` is one
   begin and one end however many overriding implementations run.
2. Whether anyone needs this call is decided from the channels' leaves: a
   class-level event of the object's class or an ancestor, an instance-level event
   of this object (its reference is computed only if some instance-level event
   exists), or an occurrence listener (the event log). If nobody does, the method
   is called and nothing else happens.
3. Otherwise the arguments are bound by name (defaults applied) and made loggable;
   an unloggable argument raises :class:`~sentinel.params.UnloggableParameter`
   before the method runs.
4. The begin event is signalled; the method runs; if it returns, the end event is
   signalled with ``result`` (if someone still needs it), on the detector the
   hierarchy signals to then (:attr:`EventMethod.wired
   <sentinel.reactive.classes.EventMethod.wired>` gives the detector and its
   channels in one read). If it raises, the exception propagates and no end
   event is signalled.

A call whose object is of no reactive class (a ``Mock(spec=...)``) runs the
method and signals nothing; one whose class derives from a reactive class that
was not set up raises :class:`~sentinel.errors.ReactiveError`.

Signatures, docstrings and introspection of the wrapped method survive. An
instance method's wrapper is a plain function updated from it: for a method with
an end event only, one generated with the method's own parameter list
(:func:`_end_only_wrapper`, the common case and the fastest), otherwise a general
one taking ``*args, **kwargs``. Classmethods and staticmethods get a wrapper
function of the same kind, held as a classmethod or staticmethod.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from keyword import iskeyword
from types import FunctionType
from typing import TYPE_CHECKING, Any

from sentinel.errors import ReactiveError, ReplacedMethodWarning, SentinelError
from sentinel.occurrence import ObjectRef, names_of, occurrence_time, split_params
from sentinel.params import PLAIN, normalize
from sentinel.reactive.declare import BEGIN
from sentinel.reactive.info import CLASSMETHOD, METHOD, class_info
from sentinel.reactive.refs import LOCAL, param_ref, ref_for

if TYPE_CHECKING:
    from sentinel.reactive.classes import Entry

__all__ = ["ReplacedMethodWarning", "install_entry", "make_wrapper"]

#: The default of the generic wrapper's first parameter: a call that names the
#: object (``Stock.set_price(self=s, price=1)``) or leaves it out.
_NO_OBJECT: Any = object()


def _not_set_up(cls: type, method: str) -> ReactiveError:
    return ReactiveError(
        f"{cls.__qualname__} derives from a reactive class but was not set up as one: "
        "an __init_subclass__ in its bases does not call super().__init_subclass__(**kwargs), "
        f"so its calls of {method} cannot signal events",
        owner=cls.__qualname__,
        method=method,
    )


def install_entry(entry: Entry, listened: bool) -> None:
    """Put ``entry``'s wrapper (``listened``; made on first use) or its plain
    callable into its class.

    Leaves the class alone if its attribute is no longer one of ours (the
    application replaced it, for example with ``mock.patch``); if the wrapper
    was due, warns once per replacement (:class:`ReplacedMethodWarning`). The
    hub tries again at each of its refreshes (each change of the detector's
    rules or listeners).
    """
    if listened == entry.installed:
        return
    owner, name = entry.owner, entry.method.name
    current = owner.__dict__.get(name)
    expected = entry._wrapper if entry.installed else entry.raw
    if current is not expected:
        if listened and entry.replaced_by != id(current):
            entry.replaced_by = id(current)
            _warn_replaced(entry, current)
        return
    entry.replaced_by = None
    if listened and entry._wrapper is None:
        entry._wrapper = make_wrapper(entry)
    setattr(owner, name, entry._wrapper if listened else entry.raw)
    entry.installed = listened


def _is_sentinel(module: Any) -> bool:
    return isinstance(module, str) and (module == "sentinel" or module.startswith("sentinel."))


def _warn_replaced(entry: Entry, current: Any) -> None:
    owner, name = entry.owner.__qualname__, entry.method.name
    events = ", ".join(entry.method.channel_names.values())
    warning = ReplacedMethodWarning(
        f"{owner}.{name} is listened to ({events}) but replaced in its class (by a "
        f"{type(current).__name__}: mock.patch or an assignment), and sentinel leaves a "
        "replaced method alone: calls of the replacement signal nothing, and once the "
        "original is back its calls signal nothing either until the detector's rules or "
        "listeners next change; define the rules before replacing the method, or after "
        "putting it back",
        owner=owner,
        method=name,
    )
    # Shown at the application's line that made the detector change.
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and _is_sentinel(frame.f_globals.get("__name__")):
        frame, level = frame.f_back, level + 1
    try:
        warnings.warn(warning, stacklevel=level)
    except Warning:
        # A warnings filter turned it into an error: raised here (while the
        # detector's rules change, under its lock) it would leave the change
        # half done, so it is shown as a warning whatever the filter says.
        warnings.showwarning(
            warning, ReplacedMethodWarning, frame.f_code.co_filename, frame.f_lineno
        )


def make_wrapper(entry: Entry) -> Any:
    """The wrapper of ``entry``'s callable (see the module docs).

    The wrapper is a plain function standing in for the method in the class
    (``functools.update_wrapper`` keeps its name, docstring, signature and
    ``__wrapped__``), held as a classmethod or staticmethod for those: Python
    binds it like the method itself, at the cost of a bare call (a wrapt wrapper
    would build a bound wrapper on every access), and pickle and ``copy`` treat
    it as they treat the method (a function by its qualified name, a bound
    classmethod as ``getattr(cls, name)``).
    """
    if entry.method.kind == METHOD:
        generic, ref_of, selected = _object_wrapper(entry)
        fn = generic
        if _can_generate(entry):
            fn = _end_only_wrapper(entry, generic, ref_of, selected)
        functools.update_wrapper(fn, entry.raw)
        return fn
    fn = functools.update_wrapper(_class_wrapper(entry), entry.raw.__func__)
    return classmethod(fn) if entry.method.kind == CLASSMETHOD else staticmethod(fn)


def _can_generate(entry: Entry) -> bool:
    """Whether :func:`_end_only_wrapper` can stand in for the generic wrapper:
    an end event only, and a plain function whose parameter list is its own
    (a decorator's ``__wrapped__`` or a ``__signature__`` would give the
    wrapper another function's parameters), named by an identifier, whose first
    parameter has no default (a call without it must fail as the generic
    wrapper's does)."""
    f = entry.raw
    name = entry.method.name
    if BEGIN in entry.method.declaration.phases or entry.shape.first is None:
        return False
    if entry.method.declaration.occurred_at is not None:
        return False  # the generic wrapper reads the occurrence time
    if type(f) is not FunctionType or hasattr(f, "__wrapped__") or hasattr(f, "__signature__"):
        return False
    if not name.isidentifier() or iskeyword(name):
        return False
    code = f.__code__
    positional = code.co_argcount  # the first parameter is positional (checked at declaration)
    return not f.__defaults__ or len(f.__defaults__) < positional


def _end_only_wrapper(
    entry: Entry,
    generic: Callable[..., Any],
    ref_of: Callable[[Any], ObjectRef],
    selected: Callable[..., tuple[bool, ObjectRef | None]],
) -> Callable[..., Any]:
    """The wrapper of a method with an end event only (the common declaration),
    generated with the method's own parameter list: the call's arguments reach
    the method, and the parameters' values (a tuple), without ``*args``/``**kwargs`` packing
    or a binder call, and the detector is called positionally (:meth:`emit`).
    It does what :func:`_object_wrapper`'s wrapper does, step for step; calls it
    does not handle itself (a ``super()`` call, an object of a class that was
    not set up) go to that wrapper. Defaults are the method's when the wrapper
    is made (it passes them on explicitly)."""
    shape = entry.shape
    me = shape.first
    assert me is not None
    taken = set(shape.names)

    def free(name: str) -> str:
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    n = {
        k: free(f"_{k}")
        for k in (
            "type", "owner", "generic", "raw", "method", "ref_of", "selected", "plain",
            "norm_result", "e", "d", "w", "p", "r", "ref", "ok", "hook", "sels",
            "by_id", "id", "k", "names",
        )
    }  # fmt: skip
    sels = entry.selectors
    label = entry.label
    fwd = f"{me}, {shape.forward}" if shape.forward else me
    ref_lookup = f"""\
        {n["ref"]} = {n["ref_of"]}({me})"""
    if entry.owner.__dictoffset__:
        # ref_of inlined for an object whose reference is already known (one call
        # less); an ORM object (it has _sa_instance_state) is referred to by its
        # current primary key instead, as ref_of does.
        ref_lookup = f"""\
        {n["k"]} = {n["by_id"]}.get({n["id"]}({me}))
        if (
            {n["k"]} is not None and {n["k"]}[0]() is {me}
            and "_sa_instance_state" not in {me}.__dict__
        ):
            {n["ref"]} = {n["k"]}[1]
        else:
            {n["ref"]} = {n["ref_of"]}({me})"""
    selectors = f"(*{n['sels']}, {n['ref']})" if sels else f"({n['ref']},)"
    src = f"""\
def {entry.method.name}({shape.full_head}):
    if {n["type"]}({me}) is not {n["owner"]}:
        return {n["generic"]}({fwd})
    {n["e"]} = {n["method"]}.end
    if {n["e"]} is None or not (
        {n["method"]}.always or {n["e"]}.any
        or ({n["e"]}.selected and {n["selected"]}({n["e"]}.selected, {me}, None)[0])
    ):
        return {n["raw"]}({fwd})
    {n["p"]} = {shape.items}
    {n["r"]} = {n["raw"]}({fwd})
    {n["w"]} = {n["method"]}.wired
    if {n["w"]} is None:
        return {n["r"]}
    {n["e"]} = {n["w"]}[2]
    if {n["method"]}.always or {n["e"]}.any:
{ref_lookup}
    elif {n["e"]}.selected:
        {n["ok"]}, {n["ref"]} = {n["selected"]}({n["e"]}.selected, {me}, None)
        if not {n["ok"]}:
            return {n["r"]}
        if {n["ref"]} is None:
            {n["ref"]} = {n["ref_of"]}({me})
    else:
        return {n["r"]}
    {n["d"]} = {n["w"]}[0]
    {n["hook"]} = {n["d"]}.dispatch.object_scope
    {n["d"]}.emit(
        {n["e"]},
        (
            *{n["p"]},
            {n["r"]} if {n["type"]}({n["r"]}) in {n["plain"]} else {n["norm_result"]}({n["r"]}),
        ),
        {n["names"]}, {n["ref"]}, {selectors},
        {n["hook"]}[0]({me}) if {n["hook"]} else None,
    )
    return {n["r"]}
"""

    def norm_result(value: Any) -> Any:
        return normalize(value, event=label, param="result", ref=param_ref)

    env = {
        n["type"]: type,
        n["owner"]: entry.owner,
        n["generic"]: generic,
        n["raw"]: entry.raw,
        n["method"]: entry.method,
        n["ref_of"]: ref_of,
        n["selected"]: selected,
        n["plain"]: PLAIN,
        n["norm_result"]: norm_result,
        n["sels"]: sels,
        n["by_id"]: LOCAL.by_id,
        n["id"]: id,
        n["names"]: names_of((*shape.keys, "result")),
    }
    fn = shape.compile(src, entry.method.name, f"<sentinel wrapper {label}>", env)
    raw = entry.raw
    # Errors of a bad call name the method as the method itself would.
    fn.__code__ = fn.__code__.replace(co_qualname=raw.__qualname__)
    fn.__defaults__ = shape.full_defaults
    fn.__kwdefaults__ = shape.kwdefaults
    return fn  # type: ignore[no-any-return]


def _object_wrapper(
    entry: Entry,
) -> tuple[
    Callable[..., Any],
    Callable[[Any], ObjectRef],
    Callable[..., tuple[bool, ObjectRef | None]],
]:
    """The generic wrapper of an instance method, with the two helpers it uses
    (the object's reference; whether an instance-level or subclass event wants
    the call)."""
    # The hot path: everything is a local, and the common cases (nobody needs
    # the call; a class-level rule needs it) are decided without calls.
    method = entry.method
    owner = entry.owner
    owner_name = entry.owner_name
    sels = entry.selectors
    binder = entry.binder
    label = entry.label
    raw = entry.raw
    by_id = LOCAL.by_id
    occurred_at = method.declaration.occurred_at
    me = entry.shape.first

    def ref_of(instance: Any) -> ObjectRef:
        try:
            d = instance.__dict__
        except AttributeError:
            return ref_for(instance, owner_name)
        if "_sa_instance_state" not in d:
            known = by_id.get(id(instance))
            if known is not None and known[0]() is instance:
                return known[1]
        return ref_for(instance, owner_name)

    def selected(sel: Any, instance: Any, ref: ObjectRef | None) -> tuple[bool, ObjectRef | None]:
        """Whether a class selector of this class, or this object, has a leaf."""
        for s in sels:
            if s in sel:
                return True, ref
        if ref is None:
            ref = ref_of(instance)
        return ref in sel, ref

    def other_call(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call whose first argument is not an object of ``owner`` itself."""
        if instance is _NO_OBJECT:
            if me in kwargs:  # the object passed by name: Stock.set_price(self=s, price=1)
                instance = kwargs.pop(me)
                return event_method(instance, *args, **kwargs)
            # No object: refused even if the method's first parameter has a
            # default (a call through the class must name its object).
            raise TypeError(f"{raw.__qualname__}() missing 1 required positional argument: {me!r}")
        t = type(instance)
        if class_info(t) is None and issubclass(t, owner):
            raise _not_set_up(t, method.name)
        # A super() call inside the object's own call (which signals for it), or
        # an object of no reactive class (a Mock(spec=...)): nothing to signal.
        return raw(instance, *args, **kwargs)

    # The object is positional-only (and optional, to let a call name it): the
    # method's own parameters may have any name, ``instance`` included.
    def event_method(instance: Any = _NO_OBJECT, /, *args: Any, **kwargs: Any) -> Any:
        if type(instance) is not owner:
            return other_call(instance, args, kwargs)
        b = method.begin
        e = method.end
        always = method.always
        ref = None
        nb = ne = False
        if b is not None:
            if always or b.any:
                nb = True
            elif b.selected:
                nb, ref = selected(b.selected, instance, ref)
        if not nb and e is not None:
            if always or e.any:
                ne = True
            elif e.selected:
                ne, ref = selected(e.selected, instance, ref)
        if not (nb or ne):
            return raw(instance, *args, **kwargs)

        # The detector and its channel, read together (a move to another
        # detector replaces both at once).
        wired = method.wired
        if wired is None:  # detached from its detector meanwhile
            return raw(instance, *args, **kwargs)
        det, b, _ = wired
        try:
            params = binder(*args, **kwargs)  # bound and made loggable
        except SentinelError:
            raise  # an unloggable argument
        except TypeError:
            return raw(instance, *args, **kwargs)  # a bad call: let the method report it
        ts = None if occurred_at is None else occurrence_time(params[occurred_at], label)
        hook = det.dispatch.object_scope  # the first listener answers
        if nb:
            if ref is None:
                ref = ref_of(instance)
            det.emit(
                b,  # type: ignore[arg-type]
                *split_params(params),
                ref,
                (*sels, ref) if sels else (ref,),
                hook[0](instance) if hook else None,
                ts,
            )
        result = raw(instance, *args, **kwargs)
        # Decided again: rules may have come or gone during the call, the
        # hierarchy may have moved to another detector (the end goes where it
        # signals now), and an ORM object may have got its primary key.
        wired = method.wired
        if wired is None:
            return result
        now, _, e = wired
        if e is None:
            return result
        ref = None
        if method.always or e.any:
            ne = True
        elif e.selected:
            ne, ref = selected(e.selected, instance, ref)
        else:
            ne = False
        if ne:
            if ref is None:
                ref = ref_of(instance)
            if now is not det:
                hook = now.dispatch.object_scope
            params["result"] = (
                result
                if type(result) in PLAIN
                else normalize(result, event=label, param="result", ref=param_ref)
            )
            now.emit(
                e,
                *split_params(params),
                ref,
                (*sels, ref) if sels else (ref,),
                hook[0](instance) if hook else None,
                ts,
            )
        return result

    return event_method, ref_of, selected


def _class_wrapper(entry: Entry) -> Callable[..., Any]:
    """The wrapper function of a classmethod (its first argument is the class)
    or a staticmethod: no source object, class-level events only. The class
    holds it as a classmethod or staticmethod, so it binds, pickles and copies
    as the method itself does."""
    method = entry.method
    owner = entry.owner
    sels = entry.selectors
    binder = entry.binder
    label = entry.label
    func = entry.raw.__func__
    occurred_at = method.declaration.occurred_at

    def needs(ch: Any) -> bool:
        if ch.any or method.always:
            return True
        sel = ch.selected
        return bool(sel) and any(s in sel for s in sels)

    def signal(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call, with the class for a classmethod (``None`` for a staticmethod)."""
        full = args if cls is None else (cls, *args)
        wired = method.wired
        if wired is None:
            return func(*full, **kwargs)
        det, b, e = wired
        nb = b is not None and needs(b)
        ne = e is not None and needs(e)
        if not (nb or ne):
            return func(*full, **kwargs)
        try:
            params = binder(*args, **kwargs)
        except SentinelError:
            raise
        except TypeError:
            return func(*full, **kwargs)
        ts = None if occurred_at is None else occurrence_time(params[occurred_at], label)
        hook = det.dispatch.object_scope  # the first listener answers
        if nb:
            det.notify(
                b,  # type: ignore[arg-type]
                params,
                selectors=sels,
                scope=hook[0](cls) if hook else None,
                timestamp=ts,
            )
        result = func(*full, **kwargs)
        wired = method.wired  # where it signals now (see the object wrapper)
        if wired is None:
            return result
        now, _, e = wired
        if e is not None and needs(e):
            if now is not det:
                hook = now.dispatch.object_scope
            params["result"] = normalize(result, event=label, param="result", ref=param_ref)
            now.notify(
                e,
                params,
                selectors=sels,
                scope=hook[0](cls) if hook else None,
                timestamp=ts,
            )
        return result

    if method.kind != CLASSMETHOD:

        def event_staticmethod(*args: Any, **kwargs: Any) -> Any:
            return signal(None, args, kwargs)

        return event_staticmethod

    # The class is positional-only: the method's parameters may have any name.
    def event_classmethod(cls: Any, /, *args: Any, **kwargs: Any) -> Any:
        if cls is not owner:
            if isinstance(cls, type) and class_info(cls) is None and issubclass(cls, owner):
                raise _not_set_up(cls, method.name)
            return func(cls, *args, **kwargs)  # cls.method() via super() of a subclass
        return signal(cls, args, kwargs)

    return event_classmethod
