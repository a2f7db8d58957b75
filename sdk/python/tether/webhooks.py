"""Kopf's webhook servers and tunnels, accepted so that an operator that
configures one in a startup function (``settings.admission.server =
kopf.WebhookAutoServer()``) loads and runs: the broker serves the webhooks
and writes their configurations, so the handler starts no server; setting
one logs that once and changes nothing."""

from __future__ import annotations

import logging
from typing import Any

LOGGER = logging.getLogger("tether.settings")
WHY = ("the broker serves the webhooks (its --admission-listen) and writes their configurations (tether-<name>): "
       "the handler runs no server or tunnel, and settings.admission.{} is ignored")


class WebhookServer:
    """Kopf's webhook servers and tunnels: their options are kept and not
    used."""

    def __init__(self, *args: Any, **options: Any):
        self.args, self.options = args, options

    def __repr__(self) -> str:
        return f"<tether.{type(self).__name__}: not used, the broker serves the webhooks>"


class WebhookAutoServer(WebhookServer):
    pass


class WebhookAutoTunnel(WebhookServer):
    pass


class WebhookK3dServer(WebhookServer):
    pass


class WebhookMinikubeServer(WebhookServer):
    pass


class WebhookDockerDesktopServer(WebhookServer):
    pass


class WebhookNgrokTunnel(WebhookServer):
    pass


NAMES = ("WebhookServer", "WebhookAutoServer", "WebhookAutoTunnel", "WebhookK3dServer", "WebhookMinikubeServer",
         "WebhookDockerDesktopServer", "WebhookNgrokTunnel")


def ignored(field: str, value: Any) -> None:
    """Log that settings.admission.<field> changes nothing."""
    LOGGER.info("settings.admission.%s = %r: %s", field, value, WHY.format(field))
