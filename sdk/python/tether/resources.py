"""How a decorator names its resource, in every form Kopf takes:

    @tether.on.create("kopfexamples")                      # any name, any group
    @tether.on.create("kex")                               # a short name
    @tether.on.create("KopfExample")                       # the kind
    @tether.on.create("kopfexamples.kopf.dev")             # name.group
    @tether.on.create("kopfexamples.v1.kopf.dev")          # name.version.group
    @tether.on.create("kopf.dev", "kopfexamples")          # group, name
    @tether.on.create("kopf.dev/v1", "kopfexamples")       # group/version, name
    @tether.on.create("v1", "pods")                        # the core group
    @tether.on.create("kopf.dev", "v1", "kopfexamples")    # group, version, name
    @tether.on.create(group="kopf.dev", plural="kopfexamples")   # keywords
    @tether.on.create("apps", "v1", kind="Deployment")     # group, version, and a keyword

A name is the plural, the singular, a short name or the kind. The broker
looks it up in discovery when the handler connects (Resource.name in the
protocol), so a name it does not know, or one that fits resources of several
groups, is refused then with the candidates. ``plural=`` and ``kind=`` with a
group name the resource exactly, as the protocol's resource and kind fields.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

# Kopf's "name.version[.group]" in one string.
_NAME_VERSION_GROUP = re.compile(r"^[^.]*\.v\d+((alpha|beta)\d+)?(\..*)?$")
# The core group serves one version; naming it says "the core group".
CORE_VERSION = "v1"


@dataclasses.dataclass(frozen=True)
class Named:
    """A resource as a Binding names it: exactly one of plural, kind and
    name. With name, group "" and version "" mean any group, and group ""
    with a version means the core group (the protocol's rule)."""

    group: str = ""
    version: str = ""
    plural: str = ""
    kind: str = ""
    name: str = ""


def parse(args: tuple[Any, ...], group: Any = None, version: Any = None, kind: Any = None, plural: Any = None,
          singular: Any = None, shortcut: Any = None) -> Named:
    """The resource that a decorator's positional arguments and resource
    keywords name."""
    named_by_keyword = any(v is not None for v in (kind, plural, singular, shortcut))
    pos_group, pos_version, pos_name = _group_version(args) if named_by_keyword else _positional(args)
    group = _agree("group", pos_group, group)
    version = _agree("version", pos_version, version)
    given = {k: v for k, v in (("name", pos_name), ("kind", kind), ("plural", plural), ("singular", singular),
                               ("shortcut", shortcut)) if v is not None}
    if not given:
        raise TypeError("name the resource: its plural, singular, short name or kind, e.g. 'kopfexamples' or "
                        "('kopf.dev', 'v1', 'kopfexamples')")
    if len(given) > 1:
        raise TypeError(f"the resource is named twice ({', '.join(f'{k}={v!r}' for k, v in given.items())}): "
                        "give one name")
    (how, word), = given.items()
    for what, value in (("group", group), ("version", version), (how, word)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{what} must be a string, not {value!r}")
    if word == "":
        raise ValueError(f"{how} must not be empty")
    if version == "":
        raise ValueError("version must not be empty: leave it out for the group's preferred version")
    if group is not None and how in ("plural", "kind"):
        return Named(group=group, version=version or "", **{how: word})
    if group == "" and version is None:
        version = CORE_VERSION
    return Named(group=group or "", version=version or "", name=word)


def _positional(args: tuple[Any, ...]) -> tuple[str | None, str | None, str | None]:
    """(group, version, name) from Kopf's one to three positional arguments;
    None where they say nothing."""
    if len(args) > 3:
        raise TypeError(f"at most 3 positional arguments name the resource (group, version, name), not {len(args)}")
    if args and (callable(args[0]) or not isinstance(args[0], str)):
        raise TypeError(f"{args[0]!r} does not name a resource: a binding names one resource by its name, "
                        "group and version (Kopf's callables, categories and EVERYTHING are not supported)")
    match args:
        case ():
            return None, None, None
        case (str() as one,) if _NAME_VERSION_GROUP.match(one):
            name, version, *rest = one.split(".", 2)
            return (rest[0] if rest else None), version, name
        case (str() as one,) if "." in one:
            name, group = one.split(".", 1)
            return group, None, name
        case (one,):
            return None, None, one
        case (str() as gv, name) if "/" in gv:
            group, version = gv.rsplit("/", 1)
            return group, version, name
        case ("v1", name):
            return "", "v1", name
        case (group, name):
            return group, None, name
    group, version, name = args
    return group, version, name


def _group_version(args: tuple[Any, ...]) -> tuple[str | None, str | None, None]:
    """(group, version) from positional arguments beside a keyword that names
    the resource: ("apps", "v1", kind="Deployment"), ("apps/v1", kind=...),
    ("v1", kind="Pod") for the core group."""
    match args:
        case ():
            return None, None, None
        case ("v1",):
            return "", "v1", None
        case (str() as gv,) if "/" in gv:
            group, version = gv.rsplit("/", 1)
            return group, version, None
        case (group,):
            return group, None, None
        case (group, version):
            return group, version, None
    raise TypeError(f"with a keyword that names the resource, at most 2 positional arguments (group, version) "
                    f"may come before it, not {len(args)}")


def _agree(what: str, positional: str | None, keyword: Any) -> Any:
    if positional is not None and keyword is not None and positional != keyword:
        raise TypeError(f"{what}={keyword!r} contradicts the positional {what} {positional!r}")
    return keyword if keyword is not None else positional
