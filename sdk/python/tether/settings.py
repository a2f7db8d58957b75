"""``settings``, the OperatorSettings that startup functions may change as
in Kopf: its fields are the runner's flags, read back after the startup
functions and before the Hello. Kopf's settings that Tether has no
counterpart for are an error when set, saying why, and not silently
ignored; a startup function that sets one fails permanently, as Kopf's
would on a bad setting, instead of being retried forever."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import durations, webhooks
from .errors import PermanentError


class SettingsError(PermanentError, AttributeError):
    """A setting that Tether does not have, or a change after the startup."""


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"settings.{name} takes an int, not {value!r}")
    return value


def _duration(name: str, value: Any) -> float:
    return durations.seconds(f"settings.{name}", value)


def _optional_duration(name: str, value: Any) -> float | None:
    return None if value is None else _duration(name, value)


# The fields, each a flag of the runner (a runner.Config field of that name).
FIELDS: dict[str, Callable[[str, Any], Any]] = {
    "window": _count,  # --window
    "priority": _count,  # --priority
    "grace": _optional_duration,  # --grace (None: the broker's)
    "absent_release_after": _optional_duration,  # --absent-release-after (None: the broker's)
    "drain_timeout": _duration,  # --drain-timeout
    "max_backoff": _duration,  # --max-backoff
}
# Kopf's settings that are these fields.
_KOPF_FIELDS = {("execution", "max_workers"): "window", ("peering", "priority"): "priority"}
# Kopf's settings whose value asks for what Tether does anyway: accepted.
_ALREADY = {("peering", "standalone"): True, ("posting", "enabled"): False}
# Kopf's webhook settings: accepted, with a line that says the broker serves
# the webhooks.
_WEBHOOKS = {("admission", "server"), ("admission", "managed")}
# Kopf's sections, and why their other settings have no counterpart.
_KOPF_SECTIONS = {
    "process": "on SIGTERM the handler drains for settings.drain_timeout (--drain-timeout) and exits",
    "posting": "Tether posts no Kubernetes Events for log lines; the broker posts one for a failure",
    "peering": "instances share the objects by UID, without peering; only settings.peering.priority "
               "(settings.priority, --priority) applies",
    "watching": "the broker watches the cluster, with its own flags",
    "queueing": "deliveries in flight are bounded by settings.window (--window)",
    "scanning": "the broker discovers the resources",
    "admission": "the broker serves the webhooks (its --admission-listen); the handler runs no server",
    "execution": "only settings.execution.max_workers (settings.window, --window) applies; retries and "
                 "backoff are options of each binding (retries=, backoff=)",
    "background": "daemons are stopped by the broker: cancellation_timeout= of @tether.daemon",
    "networking": "the handler talks only to the broker: settings.max_backoff (--max-backoff) is the longest "
                  "wait between reconnects",
    "persistence": "the broker keeps the progress on the object and owns the finalizer tether.dev/NAME (--name)",
}


class OperatorSettings:
    """The runner's flags as attributes (``settings.window = 8``), and
    Kopf's two that map to them (``settings.execution.max_workers``,
    ``settings.peering.priority``). Set them in a startup function; after
    the startup they are read only."""

    def __init__(self, **values: Any):
        from . import runner  # the runner's Config holds the defaults; it imports this module

        defaults = {f.name: f.default for f in dataclasses.fields(runner.Config) if f.name in FIELDS}
        object.__setattr__(self, "_values", defaults)
        object.__setattr__(self, "_frozen", False)
        for name, value in values.items():
            setattr(self, name, value)

    def values(self) -> dict[str, Any]:
        """The fields, for the runner's Config."""
        return dict(self._values)

    def freeze(self) -> None:
        """Refuse changes from now on: the Hello has been built."""
        object.__setattr__(self, "_frozen", True)

    def __getattr__(self, name: str) -> Any:
        if name in FIELDS:
            return self._values[name]
        if name in _KOPF_SECTIONS:
            return _Section(self, name)
        raise SettingsError(_unknown(name))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in FIELDS:
            if name in _KOPF_SECTIONS:
                raise SettingsError(f"settings.{name} is a section; set its fields")
            raise SettingsError(_unknown(name))
        if self._frozen:
            raise SettingsError(f"settings.{name}: the settings apply only in startup functions, before the "
                                "handler connects")
        self._values[name] = FIELDS[name](name, value)

    def __repr__(self) -> str:
        return f"<tether.OperatorSettings {self._values}>"


def _unknown(name: str) -> str:
    return f"settings.{name}: Tether has no such setting; the settings are {', '.join(FIELDS)}"


class _Section:
    """One of Kopf's sections: its fields that map to Tether's, or an error."""

    def __init__(self, settings: OperatorSettings, name: str):
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, field: str) -> Any:
        key = (self._name, field)
        if key in _KOPF_FIELDS:
            return getattr(self._settings, _KOPF_FIELDS[key])
        if key in _ALREADY:
            return _ALREADY[key]
        raise SettingsError(self._why(field))

    def __setattr__(self, field: str, value: Any) -> None:
        key = (self._name, field)
        if key in _KOPF_FIELDS:
            setattr(self._settings, _KOPF_FIELDS[key], value)
        elif key in _ALREADY and value == _ALREADY[key]:
            return
        elif key in _WEBHOOKS:
            webhooks.ignored(field, value)
        else:
            raise SettingsError(self._why(field))

    def _why(self, field: str) -> str:
        return f"settings.{self._name}.{field}: Kopf's setting has no counterpart in Tether: {_KOPF_SECTIONS[self._name]}"
