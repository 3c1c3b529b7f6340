"""Lazy package exports (PEP 562): a package face names what it exports without importing it until first use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_getattr(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of a package whose names in ``sources`` load on first use.

    A package face binds it as ``__getattr__ = lazy_getattr(__name__, {...})``, so importing the package imports
    none of those modules (and whatever heavy libraries they import) until one of their names is asked for.

    Args:
        package: The package's ``__name__``, named in the error for a name it does not have.
        sources: Each lazily loaded name and the module that defines it (``module:attribute`` where the module
            names it otherwise).

    Returns:
        A function that returns the name's object from its module, or raises AttributeError for any other name.
    """

    def __getattr__(name: str) -> Any:
        if name in sources:
            module, _, attribute = sources[name].partition(":")
            return getattr(import_module(module), attribute or name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
