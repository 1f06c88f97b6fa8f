"""The one form of every list-valued option of ``whatif``.

Each takes one or more values after the flag, and the flag may repeat; names may also be
comma-separated. So ``--simulators epanet sumo``, ``--simulators epanet --simulators sumo`` and
``--simulators epanet,sumo`` give the same list. File lists (``--spec``, ``--forms``) are not
split at commas, since a file name may hold one.

add_list_option(parser, "--simulators", "--simulator", metavar="SIM", help="only these")
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

# the sentence every list option's help ends with (before its default)
NAMES_FORM = "one or more, space- or comma-separated; the option may repeat"
FILES_FORM = "one or more; the option may repeat"


class ListOption(argparse.Action):
    """``nargs="+"`` that extends the list on every use of the flag, splits names at commas
    (``split_commas``) and checks each item (``allowed``) after the split, so ``epanet,sumo``
    is checked as two names."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        split_commas: bool = True,
        allowed: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("nargs", "+")
        kwargs.setdefault("default", [])
        super().__init__(option_strings, dest, **kwargs)
        self.split_commas = split_commas
        self.allowed = None if allowed is None else tuple(allowed)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        flag = option_string or self.dest
        current = getattr(namespace, self.dest, None)
        # the first use replaces the default; later uses of the flag add to what was given
        items = [] if current is None or current is self.default else list(current)
        given = [values] if isinstance(values, str) else list(values or [])
        for value in given:
            for part in value.split(",") if self.split_commas else [value]:
                item = part.strip() if self.split_commas else part
                if self.split_commas and not item:  # a file or a whole item: its reader says
                    parser.error(f"argument {flag}: an empty item in {value!r}")
                if self.allowed is not None and item not in self.allowed:
                    choices = ", ".join(self.allowed)
                    parser.error(
                        f"argument {flag}: invalid choice: {item!r} (choose from {choices})"
                    )
                items.append(item)
        setattr(namespace, self.dest, items)


def add_list_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *flags: str,
    help: str,
    metavar: str,
    files: bool = False,
    default: Sequence[Any] = (),
    allowed: Iterable[str] | None = None,
    dest: str | None = None,
    required: bool = False,
    split_later: bool = False,
) -> argparse.Action:
    """Add a list option in the one form. The first flag names it; later flags (the singular,
    say) are accepted the same. ``help`` ends with its default in parentheses, as every option's
    does (or ``(required)``); the form goes just before it. ``split_later``: the items are kept whole here and the
    command splits them at commas itself, with errors of its own (``--models``)."""
    form = FILES_FORM if files and not split_later else NAMES_FORM
    last = max(help.rfind("(default"), help.rfind("(required)"))
    if help.endswith(")") and last >= 0:
        help = f"{help[:last].rstrip()}; {form} {help[last:]}"
    else:
        help = f"{help} ({form})"
    return parser.add_argument(
        *flags,
        action=ListOption,
        split_commas=not (files or split_later),
        allowed=allowed,
        default=None if required else list(default),
        metavar=metavar,
        help=help,
        required=required,
        **({"dest": dest} if dest else {}),
    )
