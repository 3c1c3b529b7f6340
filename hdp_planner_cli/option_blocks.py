"""Option blocks: a group's command-line options declared once, built into the group (a dataclass) and handed to a
command in one keyword.

A command takes blocks with :func:`with_groups`: ``@with_groups(data=DATA, audit=AUDIT.pick("audit"))`` adds the
blocks' options to the command line and passes the command ``groups={"data": DataOptions(…), "audit": …}``. A command
picks the options it takes and changes a default or a declaration where its meaning differs. Imports nothing of the
CLI's commands nor of the trainer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, replace
from typing import Annotated, Any

import typer

REQUIRED = inspect.Parameter.empty
"""The default of an option that must be given."""


@dataclass(frozen=True)
class Opt:
    """One command-line option: its Typer declaration (``Annotated[type, typer.Option(…)]``) and default
    (:data:`REQUIRED` if it has none); ``flat``, the group option it sets when that is not the parameter's name, and
    ``convert``, the command line's value to the option's."""

    declared: Any
    default: Any = None
    _: KW_ONLY
    flat: str | None = None
    convert: Callable[[Any], Any] | None = None


@dataclass(frozen=True, kw_only=True)
class OptionBlock:
    """The command-line options of one group, by parameter name. A group option is the group's field of that name,
    or the field its class's ``FLAT`` mapping (option → field) names."""

    group: type
    options: dict[str, Opt]

    def pick(self, *names: str, **changes: Any) -> OptionBlock:
        """The block with only ``names`` (all if none), each of ``changes`` a new :class:`Opt` or a new default."""
        chosen = {name: self.options[name] for name in names or self.options}
        for name, change in changes.items():
            chosen[name] = change if isinstance(change, Opt) else replace(chosen[name], default=change)
        return OptionBlock(group=self.group, options=chosen)

    def build(self, values: dict[str, Any]) -> Any:
        """The group from the parsed values of the block's options (the options not taken: the group's defaults)."""
        field_of: dict[str, str] = getattr(self.group, "FLAT", {})
        return self.group(**{
            field_of.get(opt.flat or name, opt.flat or name): opt.convert(values[name]) if opt.convert else values[name]
            for name, opt in self.options.items()
        })  # fmt: skip


def with_groups(**blocks: OptionBlock) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command that takes each block's options and receives the groups built from them
    (:meth:`OptionBlock.build`), by block name, in one keyword-only parameter ``groups`` (a dict) that it declares
    without a default; the blocks' options take the place of ``groups`` among its own options."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = list(signature.parameters.values())
        at = [p.name for p in own].index("groups")
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt.default, annotation=opt.declared)
                 for block in blocks.values() for name, opt in block.options.items()]  # fmt: skip

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            groups = {key: block.build({name: values.pop(name) for name in block.options}) for key, block in
                      blocks.items()}  # fmt: skip
            return command(**values, groups=groups)

        params = own[:at] + added + own[at + 1 :]
        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def option(flag: str, kind: Any, help: str, **kw: Any) -> Any:
    """The Typer declaration of the option ``flag`` of type ``kind``."""
    return Annotated[kind, typer.Option(flag, help=help, **kw)]
