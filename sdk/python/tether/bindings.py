"""What a decorator declares, checked as far as the SDK can without the
broker, and its wire form: one proto Binding of the Hello. The broker checks
the rest (discovery, selectors, CEL, permissions) and names the bad field."""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import re
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import durations, limits, resources, selectors
from .errors import ErrorsMode
from .v1 import broker_pb2 as pb


class Kind(enum.Enum):
    """The kind of a binding; the value is its name in messages and ids."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    RESUME = "resume"
    FIELD = "field"
    EVENT = "event"
    TIMER = "timer"
    DAEMON = "daemon"
    VALIDATE = "validate"
    MUTATE = "mutate"
    INDEX = "index"

    @property
    def admission(self) -> bool:
        return self in (Kind.VALIDATE, Kind.MUTATE)

    @property
    def may_hold(self) -> bool:
        return self in (Kind.DELETE, Kind.TIMER, Kind.DAEMON)

    @property
    def proto(self) -> int:
        return pb.BindingKind.Value("BINDING_KIND_" + self.name)


class Finalizer(enum.Enum):
    """Whether and how a delete, timer or daemon binding holds its objects
    with the finalizer tether.dev/<handler> (rule 2 of "The contract" in
    docs/design.md)."""

    HOLD = "HOLD"
    STRICT = "STRICT"
    NONE = "NONE"

    @property
    def proto(self) -> int:
        return pb.FinalizerPolicy.Value("FINALIZER_POLICY_" + self.name)


HOLD = Finalizer.HOLD
"""Held until the deletion work is done, or the handler is absent past its grace."""
STRICT = Finalizer.STRICT
"""Held until the handler acknowledges, or the cancellation timeout runs out."""
NONE = Finalizer.NONE
"""Never held: timers and daemons stop when the broker sees the object gone."""

# Where a binding's results go (results=): status.<Kopf's handler id>, as
# Kopf keeps them, or the broker's annotation for the binding.
STATUS_RESULTS = "status"
ANNOTATION_RESULTS = "annotation"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
FAILURE_POLICIES = ("Ignore", "Fail")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The decorators' keywords that name the resource (resources.parse).
_RESOURCE_KEYWORDS = ("group", "version", "kind", "plural", "singular", "shortcut")
# Hex digits of the hash that ends a default id cut to the length limit.
_ID_HASH_LENGTH = 8


@dataclasses.dataclass(frozen=True)
class Spec:
    """One binding as declared; durations are in seconds, 0 meaning unset."""

    id: str
    kind: Kind
    group: str
    version: str
    plural: str = ""
    resource_kind: str = ""
    # name: any name of the resource, looked up by the broker (resources.py)
    name: str = ""
    namespaces: tuple[str, ...] = ()
    label_selector: str = ""
    field_selector: str = ""
    annotations: tuple[tuple[str, str, str], ...] = ()
    when: str = ""
    field: str = ""
    optional: bool = False
    finalizer: Finalizer | None = None
    retries: int | None = None
    timeout: float = 0.0
    backoff: float = 0.0
    max_backoff: float = 0.0
    # timers
    interval: float = 0.0
    initial_delay: float = 0.0
    idle: float = 0.0
    sharp: bool = False
    # daemons
    cancellation_timeout: float = 0.0
    # after a stop, an async daemon still running this long is cancelled
    # (with cancellation_timeout; the SDK's, as Kopf's daemons)
    cancellation_backoff: float = 0.0
    restart: bool = False
    # what other exceptions mean (the SDK's: the protocol has no field)
    errors: ErrorsMode = ErrorsMode.TEMPORARY
    # validate and mutate
    operations: tuple[str, ...] = ()
    subresource: str = ""
    namespace_selector: str = ""
    match_conditions: tuple[tuple[str, str], ...] = ()
    failure_policy: str = ""
    side_effects: bool | None = None
    # where results go: "status" (under status.<result_key>) or "annotation"
    results: str = STATUS_RESULTS
    # the key under status: Kopf's handler id (kopf_id)
    result_key: str = ""


def check_name(what: str, name: str, max_length: int = limits.MAX_NAME_LENGTH) -> None:
    if isinstance(name, str) and len(name) > max_length:
        raise ValueError(f"{what} {name!r} is {len(name)} characters long; it must be a DNS-1123 label "
                         f"of at most {max_length} characters")
    if not isinstance(name, str) or not _DNS1123_LABEL.match(name):
        raise ValueError(f"{what} {name!r} is not a DNS-1123 label (lower case letters, digits and '-') "
                         f"of at most {max_length} characters")


def default_id(kind: Kind, fn: Callable[..., Any]) -> str:
    """"<kind>-<function name>", underscores as dashes: stable across
    releases as long as the function keeps its name (results are stored
    under the id), and distinct when one function has several decorators.
    Past the length limit it is cut, and ends with a hash of the whole, so
    that two long names with the same beginning still differ."""
    name = getattr(fn, "__name__", "")
    candidate = f"{kind.value}-{name.lower().replace('_', '-').strip('-')}"
    if len(candidate) > limits.MAX_NAME_LENGTH:
        digest = hashlib.sha256(candidate.encode()).hexdigest()[:_ID_HASH_LENGTH]
        candidate = f"{candidate[:limits.MAX_NAME_LENGTH - _ID_HASH_LENGTH - 1].rstrip('-')}-{digest}"
    try:
        check_name("id", candidate)
    except ValueError:
        raise ValueError(f"the default binding id {candidate!r} (from the function's name) is not a "
                         f"DNS-1123 label of at most {limits.MAX_NAME_LENGTH} characters: pass id=") from None
    return candidate


def kopf_id(fn: Callable[..., Any], id: str | None, field: str | None) -> str:
    """The id Kopf gives the handler, the key of status its results are
    stored under: id= if given, else the function's qualified name (a
    lambda's file and line), with "/<field>" when the binding names a
    field."""
    if id is None:
        while True:
            if isinstance(fn, functools.partial):
                fn = fn.func
            elif hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__
            else:
                break
        if isinstance(fn, types.FunctionType) and fn.__name__ == "<lambda>":
            id = f"lambda:{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
        else:
            id = str(getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn))))
    return f"{id}/{field}" if field else id


def _results(value: Any) -> str:
    if value not in (STATUS_RESULTS, ANNOTATION_RESULTS):
        raise ValueError(f"results={value!r} is not {STATUS_RESULTS!r} (status.<handler id>, as Kopf stores them) "
                         f"or {ANNOTATION_RESULTS!r} (the broker's annotation for the binding)")
    return value


def _result_key(key: str) -> str:
    if len(key.encode()) > limits.MAX_RESULT_KEY_BYTES or not all(" " < c <= "~" for c in key):
        raise ValueError(f"the results go to status[{key!r}] (Kopf's handler id), which is not printable ASCII "
                         f"without spaces of at most {limits.MAX_RESULT_KEY_BYTES} bytes: pass id=, or "
                         f"results={ANNOTATION_RESULTS!r}")
    return key


def build(kind: Kind, fn: Callable[..., Any], resource: tuple[Any, ...], options: Mapping[str, Any]) -> Spec:
    """Check a decorator's arguments and make its Spec: resource holds its
    positional arguments, options the keyword arguments it takes, None for
    those not given."""
    opts = {k: v for k, v in options.items() if v is not None}
    named = resources.parse(resource, **{k: opts.pop(k, None) for k in _RESOURCE_KEYWORDS})
    fields: dict[str, Any] = {"kind": kind, "group": named.group, "version": named.version, "plural": named.plural,
                              "resource_kind": named.kind, "name": named.name}
    given_id = opts.pop("id", None)
    fields["id"] = given_id or default_id(kind, fn)
    check_name("binding id", fields["id"])
    field = opts.pop("result_field", None)
    if "results" in opts:
        fields["results"] = _results(opts.pop("results"))
    if kind.admission:
        fields["results"] = ANNOTATION_RESULTS  # a review stores no results
    elif fields.get("results", STATUS_RESULTS) == STATUS_RESULTS:
        fields["result_key"] = _result_key(kopf_id(fn, given_id, field))
    fields["namespaces"] = namespaces(opts.pop("namespaces", ()))
    fields["label_selector"] = selectors.label_selector(opts.pop("labels", None))
    fields["annotations"] = selectors.annotation_filters(opts.pop("annotations", None))
    fields["when"] = selectors.when(opts.pop("when", None))
    if field_when := opts.pop("field_when", ""):
        fields["when"] = f"({fields['when']}) && {field_when}" if fields["when"] else field_when
    for name in ("field_selector", "subresource", "namespace_selector"):
        if name in opts:
            fields[name] = _string(name, opts.pop(name))
    for name in ("timeout", "backoff", "max_backoff", "interval", "initial_delay", "idle", "cancellation_timeout",
                 "cancellation_backoff"):
        if name in opts:
            fields[name] = durations.seconds(name, opts.pop(name))
    for name in ("optional", "sharp", "restart", "side_effects"):
        if name in opts:
            fields[name] = _flag(name, opts.pop(name))
    if "field" in opts:
        fields["field"] = field_path(opts.pop("field"))
    if "finalizer" in opts:
        fields["finalizer"] = _finalizer(opts.pop("finalizer"))
    if "retries" in opts:
        fields["retries"] = _retries(opts.pop("retries"))
    if "errors" in opts:
        fields["errors"] = _errors_mode(opts.pop("errors"))
    fields["operations"] = _operations(opts.pop("operations", None), opts.pop("operation", None))
    fields["failure_policy"] = _failure_policy(opts.pop("failure_policy", None), opts.pop("ignore_failures", None))
    fields["match_conditions"] = _match_conditions(opts.pop("match_conditions", None))
    if opts:
        raise TypeError(f"unexpected options {sorted(opts)}")  # a decorator passed what build does not know
    spec = Spec(**fields)
    _check(spec)
    return spec


def namespaces(value: str | Iterable[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    for ns in names:
        check_name("namespace", ns, limits.MAX_NAMESPACE_LENGTH)
    if len(set(names)) != len(names):
        raise ValueError(f"namespaces={list(names)!r} names a namespace twice")
    if len(names) > limits.MAX_NAMESPACES:
        raise ValueError(f"{len(names)} namespaces, more than the {limits.MAX_NAMESPACES} a binding may name; "
                         "bind cluster-wide and narrow with labels= or when=")
    return names


def _errors_mode(value: Any) -> ErrorsMode:
    if not isinstance(value, ErrorsMode):
        raise TypeError(f"errors= takes tether.ErrorsMode.TEMPORARY, PERMANENT or IGNORED, not {value!r}")
    return value


def _string(option: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{option}= takes a string, not {value!r}")
    return value


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{option}= takes True or False, not {value!r}")
    return value


def field_path(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = ".".join(value)  # Kopf also takes ('spec', 'replicas')
    if not isinstance(value, str) or not value or "" in value.split("."):
        raise ValueError(f"field={value!r} is not a dotted path such as 'spec.replicas'")
    return value


def _finalizer(value: Any) -> Finalizer:
    if not isinstance(value, Finalizer):
        raise TypeError(f"finalizer= takes tether.HOLD, tether.STRICT or tether.NONE, not {value!r}")
    return value


def retries_after_first(value: Any) -> int:
    """Kopf's retries=, the attempts in all (retries=3 runs the function at
    most 3 times; negative: forever), as the protocol's Binding.retries, the
    retries after the first attempt."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"retries= takes an int, the attempts in all as in Kopf (negative: forever), not {value!r}")
    if value == 0:
        raise ValueError("retries=0 would never run the function (retries= counts the attempts in all, as in "
                         "Kopf): give 1 for a single attempt")
    return -1 if value < 0 else min(value - 1, 2**31 - 1)


_retries = retries_after_first


def _operations(operations: Any, operation: Any) -> tuple[str, ...]:
    if operations is not None and operation is not None:
        raise TypeError("give operations= or Kopf's operation=, not both")
    if operation is not None:
        operations = [operation]
    if operations is None:
        return ()
    if isinstance(operations, str):
        operations = [operations]
    out = []
    for op in operations:
        if not isinstance(op, str) or op.upper() not in OPERATIONS:
            raise ValueError(f"operation {op!r} is not one of {', '.join(OPERATIONS)}")
        if op.upper() not in out:
            out.append(op.upper())
    if not out:
        raise ValueError("operations= is empty (leave it out for CREATE and UPDATE)")
    return tuple(out)


def _failure_policy(policy: Any, ignore_failures: Any) -> str:
    if policy is not None and ignore_failures is not None:
        raise TypeError("give failure_policy= or Kopf's ignore_failures=, not both")
    if ignore_failures is not None:
        return FAILURE_POLICIES[0] if _flag("ignore_failures", ignore_failures) else FAILURE_POLICIES[1]
    if policy is None:
        return ""
    for name in FAILURE_POLICIES:
        if isinstance(policy, str) and policy.lower() == name.lower():
            return name
    raise ValueError(f"failure_policy={policy!r} is not 'Ignore' or 'Fail'")


def _match_conditions(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    pairs = list(value.items() if isinstance(value, Mapping) else value)
    names = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
            raise TypeError("match_conditions= takes {name: CEL expression} or [(name, expression), ...], "
                            f"not {pair!r}")
        if pair[0] in names:
            raise ValueError(f"match_conditions=: the name {pair[0]!r} is used twice")
        names.add(pair[0])
    if len(pairs) > limits.MAX_MATCH_CONDITIONS:
        raise ValueError(f"{len(pairs)} match conditions, more than the {limits.MAX_MATCH_CONDITIONS} a webhook may have")
    return tuple(pairs)


def _check(s: Spec) -> None:
    """The combinations the Go SDK refuses before it connects."""
    if s.kind is Kind.FIELD and not s.field:
        raise ValueError("field= is required: the dotted path whose changes are delivered")
    if s.kind is Kind.TIMER and s.interval < limits.MIN_TIMER_INTERVAL:
        raise ValueError(f"interval= is required and at least {limits.MIN_TIMER_INTERVAL} s, not {s.interval}")
    if s.backoff and s.max_backoff and s.backoff > s.max_backoff:
        raise ValueError(f"backoff={s.backoff} is more than max_backoff={s.max_backoff}")
    holds = s.finalizer in (HOLD, STRICT)
    if s.kind.admission:
        if s.finalizer is HOLD:
            raise ValueError(f"finalizer=tether.HOLD: {s.kind.value} bindings hold no objects; only tether.STRICT "
                             "(keep the webhook, failing closed, while the handler is absent) applies")
        if s.finalizer is STRICT and s.failure_policy == "Ignore":
            raise ValueError("failure_policy='Ignore' contradicts finalizer=tether.STRICT, which keeps the webhook failing closed")
        t = s.timeout
        if t and (t != int(t) or not limits.MIN_WEBHOOK_TIMEOUT <= t <= limits.MAX_WEBHOOK_TIMEOUT):
            raise ValueError(f"timeout={t}: a webhook's timeout is whole seconds from "
                             f"{limits.MIN_WEBHOOK_TIMEOUT} to {limits.MAX_WEBHOOK_TIMEOUT}")
        if s.subresource and s.subresource != "*" and not _DNS1123_LABEL.match(s.subresource):
            raise ValueError(f"subresource={s.subresource!r} is neither '*' nor a subresource name")
    elif holds and not s.kind.may_hold:
        raise ValueError(f"finalizer={s.finalizer!r} applies to delete, timer and daemon bindings only")
    if holds and s.optional:
        raise ValueError(f"finalizer={s.finalizer!r} contradicts optional=True")


def to_proto(s: Spec, namespaces: tuple[str, ...] | None = None) -> pb.Binding:
    """The Hello's binding; ``namespaces`` replaces the Spec's (the runner's
    --namespace scope)."""
    b = pb.Binding(
        id=s.id, kind=s.kind.proto,
        resource=pb.Resource(group=s.group, version=s.version, resource=s.plural, kind=s.resource_kind, name=s.name),
        namespaces=s.namespaces if namespaces is None else namespaces,
        label_selector=s.label_selector, field_selector=s.field_selector, when=s.when, field=s.field,
        optional=s.optional, finalizer=s.finalizer.proto if s.finalizer else pb.FINALIZER_POLICY_UNSPECIFIED)
    for key, op, value in s.annotations:
        b.annotations.add(key=key, operator=pb.AnnotationFilter.Operator.Value("OPERATOR_" + op.upper()), value=value)
    if s.retries is not None:
        b.retries = s.retries
    if s.result_key:
        b.results, b.result_key = pb.RESULT_STORE_STATUS, s.result_key
    for name in ("backoff", "max_backoff") + (() if s.kind.admission else ("timeout",)):
        if d := durations.optional(getattr(s, name)):
            getattr(b, name).CopyFrom(d)
    # The broker refuses timer, daemon and admission options on bindings of
    # other kinds, so each is set only where it belongs.
    if s.kind is Kind.TIMER:
        b.timer.CopyFrom(pb.TimerOptions(
            interval=durations.optional(s.interval), initial_delay=durations.optional(s.initial_delay),
            idle=durations.optional(s.idle), sharp=s.sharp))
    elif s.kind is Kind.DAEMON:
        # The broker waits for the whole stop: the backoff, then the
        # timeout that the cancellation has to end the daemon in.
        wait = s.cancellation_timeout + s.cancellation_backoff if s.cancellation_timeout else 0.0
        b.daemon.CopyFrom(pb.DaemonOptions(cancellation_timeout=durations.optional(wait), restart=s.restart))
    elif s.kind.admission:
        b.admission.CopyFrom(pb.AdmissionOptions(
            operations=[pb.AdmissionOperation.Value("ADMISSION_OPERATION_" + op) for op in s.operations],
            subresource=s.subresource, namespace_selector=s.namespace_selector,
            match_conditions=[pb.MatchCondition(name=n, expression=e) for n, e in s.match_conditions],
            timeout=durations.optional(s.timeout),
            failure_policy=pb.FailurePolicy.Value("FAILURE_POLICY_" + s.failure_policy.upper())
            if s.failure_policy else pb.FAILURE_POLICY_UNSPECIFIED,
            side_effects={None: pb.SIDE_EFFECTS_UNSPECIFIED, False: pb.SIDE_EFFECTS_NONE,
                          True: pb.SIDE_EFFECTS_NONE_ON_DRY_RUN}[s.side_effects]))
    return b
