"""Importing a handler file, as ``python3 FILE`` would: its folder goes
first on sys.path, so that it imports its siblings."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType


def import_file(path: str, name: str | None = None) -> ModuleType:
    """Import the file at path as the module name (default the file's name
    without .py); a module that fails to import is not left in
    sys.modules."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
