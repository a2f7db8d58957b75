"""``python3 -m tether run handler.py``, like ``kopf run``: import the
handler's files and modules (their decorators fill the default registry),
connect to the broker and serve until SIGTERM or SIGINT. Exit status: 0
after a clean stop, 1 when a handler file cannot be loaded or a startup or
cleanup function fails for good, 2 for bad flags or configuration and when
the broker rejects the handler."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from . import durations, files, limits, log, runner
from .errors import RejectedError
from .hooks import ActivityError
from .registry import get_default_registry
from .version import __version__

DESCRIPTION = """\
Run a Tether handler: import the Python files and modules that register
functions with @tether.on.create, @tether.timer, ... and serve the broker's
deliveries to them. The handler reconnects with backoff when the broker goes
away; SIGTERM or SIGINT make it stop taking deliveries, stop its daemons,
say goodbye, finish what is in flight (up to --drain-timeout) and exit 0.
A broker that rejects the handler (a bad binding, a missing permission, a
bad token) makes it exit 2 with the broker's message."""
EPILOG = """Durations (D) are 500ms, 30s, 5m, 1h30m, or seconds.
Exit status: 0 after a stop, 1 when a handler file or module does not load
or a startup or cleanup function fails for good, 2 for bad flags or
configuration and when the broker rejects the handler."""


def _duration(text: str) -> float:
    try:
        return durations.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _window(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= runner.MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"{text!r} is not a window from 1 to {runner.MAX_WINDOW}")
    return n


def _priority(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= limits.MAX_PRIORITY:
        raise argparse.ArgumentTypeError(f"{text!r} is not a priority from 0 to {limits.MAX_PRIORITY}")
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m tether", description="Tether's Python SDK.")
    p.add_argument("--version", action="version", version=f"tether-python {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="run")
    r = sub.add_parser("run", help="run a handler", description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("paths", nargs="*", metavar="FILE", help="Python files to import, in order")
    r.add_argument("-m", "--module", action="append", default=[], metavar="MODULE",
                   help="a module to import by name (repeatable)")
    r.add_argument("--name", required=True,
                   help="handler name, a DNS-1123 label of at most 40 characters; it names the hold "
                        "(finalizer tether.dev/NAME) and must be granted to the handler's identity")
    r.add_argument("--broker", action="append", metavar="HOST:PORT",
                   help=f"broker address, a gRPC target (default {runner.DEFAULT_BROKER}); repeated, the "
                        "addresses are tried in turn, one per connection attempt, for broker replicas "
                        "reached without a Service. A handler with validate or mutate bindings keeps a session "
                        "to each replica instead, and to every address of a name that has several (the headless "
                        "Service tether-broker-replicas), so that every replica answers its reviews")
    r.add_argument("--insecure", action="store_true",
                   help="plain text and no token, for a broker started with --insecure for local development")
    r.add_argument("--token-file", metavar="FILE",
                   help="file with the bearer token, read again on every connection attempt "
                        f"(default: {runner.DEFAULT_BROKER_TOKEN_FILE}, a token for the broker's audience, where "
                        f"mounted, else {runner.DEFAULT_TOKEN_FILE}, the pod's ServiceAccount token)")
    r.add_argument("--tls-ca-file", metavar="FILE",
                   help="PEM file of the CA that signed the broker's certificate (default: the system roots)")
    r.add_argument("--tls-server-name", metavar="NAME",
                   help="name to verify the broker's certificate against (default: the host in --broker)")
    r.add_argument("--instance-id", default=None, metavar="ID",
                   help="this process's id among the handler's instances (default HOST-PID-RANDOM)")
    r.add_argument("--window", type=_window, default=runner.DEFAULT_WINDOW, metavar="N",
                   help="deliveries in flight at once; also the size of the thread pool of sync functions, "
                        "with as many threads more for each broker replica's session of a handler on every "
                        "replica (default %(default)s; the broker may cap it)")
    r.add_argument("--dev", action="store_true",
                   help="development mode, like kopf run --dev: connect with priority 1 (unless --priority), "
                        "so that this instance takes every object and review of the handler from the "
                        "in-cluster instances (priority 0) while it runs, daemons included; they get them back "
                        "when it stops. Needs the verb \"takeover\" on handlers.tether.dev/NAME")
    r.add_argument("--priority", type=_priority, default=None, metavar="N",
                   help=f"this instance's priority, 0 to {limits.MAX_PRIORITY}: the connected instances of the "
                        "highest priority take all the handler's work (default 0; 1 with --dev)")
    r.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                   help="serve only this namespace (repeatable; default all). A binding that names namespaces "
                        "keeps those of them listed here")
    r.add_argument("-A", "--all-namespaces", action="store_true",
                   help="serve every namespace, as without --namespace (Kopf's flag, so its commands work as they are)")
    r.add_argument("--standalone", action="store_true",
                   help="accepted for Kopf's sake and changes nothing: instances of a handler share its objects "
                        "by UID, and there is no peering to leave")
    r.add_argument("--grace", type=_duration, metavar="D",
                   help="ask for this grace: how long the handler may have no instance connected before "
                        "objects being deleted are released (e.g. 30s; default the broker's)")
    r.add_argument("--absent-release-after", type=_duration, metavar="D",
                   help="ask the broker to strip the handler's holds after it has been absent this long "
                        "(0: never; default the broker's)")
    r.add_argument("--drain-timeout", type=_duration, default=runner.DEFAULT_DRAIN_TIMEOUT, metavar="D",
                   help="on SIGTERM, how long deliveries in flight and daemons may take "
                        f"(default {runner.DEFAULT_DRAIN_TIMEOUT:g}s)")
    r.add_argument("--max-backoff", type=_duration, default=runner.RECONNECT_MAX, metavar="D",
                   help=f"longest wait between reconnects; waits start at {runner.RECONNECT_MIN:g}s and double "
                        f"(default {runner.RECONNECT_MAX:g}s)")
    r.add_argument("--liveness", metavar="URL",
                   help="serve the probes at this URL, like kopf run --liveness: http://HOST[:PORT]/PATH such as "
                        "http://0.0.0.0:8080/healthz. GET answers 503 until the handler first connects to the "
                        "broker (after the startup functions), then 200 with the @tether.on.probe functions' "
                        "results as JSON (503 when one raised)")
    r.add_argument("--log-format", choices=log.FORMATS, default="plain",
                   help="plain lines, or one JSON object per line (default %(default)s)")
    r.add_argument("-v", "--verbose", action="store_true", help="log debug lines too")
    return p


def priority(args: argparse.Namespace) -> int:
    """Hello.priority from the flags: --priority N, else 1 for --dev, else 0."""
    if args.priority is not None:
        return args.priority
    return 1 if args.dev else 0


def load(paths: Sequence[str], modules: Sequence[str]) -> None:
    """Import the handler's code; a file's folder goes first on sys.path,
    as for ``python3 FILE``, so that it imports its siblings."""
    for path in paths:
        files.import_file(path)
    for name in modules:
        importlib.import_module(name)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """tether.operator's keywords from the run command's flags."""
    out = dict(
        name=args.name, broker=tuple(args.broker or (runner.DEFAULT_BROKER,)), window=args.window,
        insecure=args.insecure, token_file=args.token_file, tls_ca_file=args.tls_ca_file,
        tls_server_name=args.tls_server_name,
        namespaces=tuple(args.namespace), grace=args.grace, absent_release_after=args.absent_release_after,
        drain_timeout=args.drain_timeout, max_backoff=args.max_backoff, priority=priority(args),
        liveness=args.liveness)
    if args.instance_id:
        out["instance_id"] = args.instance_id
    return out


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the parser cannot check alone; exits through p.error."""
    if not args.paths and not args.module:
        p.error("run: name the handler's files or modules (-m)")
    if args.insecure and (args.tls_ca_file or args.tls_server_name):
        p.error("run: --tls-ca-file and --tls-server-name make no sense with --insecure")
    if args.all_namespaces and args.namespace:
        p.error("run: --all-namespaces and --namespace contradict each other")


def exit_code(e: BaseException | None, name: str) -> int:
    """The exit status of a handler that ended with e (None: stopped), with
    the error logged: 2 for a configuration or a broker that refused it, 1
    for a startup or cleanup function that failed for good."""
    logger = logging.getLogger("tether")
    if isinstance(e, runner.ConfigError):
        logger.error("invalid configuration of handler %r: %s", name, e)
        return 2
    if isinstance(e, RejectedError):
        logger.error("%s", e)
        return 2
    if isinstance(e, ActivityError):
        logger.error("%s", e, exc_info=e.__cause__)
        return 1
    if e is not None:
        raise e
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    check(p, args)
    log.configure(args.log_format, args.verbose)
    try:
        load(args.paths, args.module)
    except Exception:
        logging.getLogger("tether").error("cannot load the handler:\n%s", traceback.format_exc().rstrip())
        return 1
    try:
        runner.run(get_default_registry(), **settings(args))
    except (runner.ConfigError, RejectedError, ActivityError) as e:
        return exit_code(e, args.name)
    return 0
