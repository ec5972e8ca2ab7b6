"""What a shell user expects of every ``gguf-audit`` command: ``-q/--quiet``, ``-v/--verbose``, completion scripts.

The flags are added once, by :func:`add_verbosity_flags`, to the top-level
parser and to every subcommand's, built in or plugged in. Completion scripts
are generated from the same parsers and hold static word lists: a TAB runs the
shell's own functions, never Python.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from gguf_audit.redact import RedactFilter

__all__ = ["SHELLS", "add_verbosity_flags", "completion_script", "parse_command_line", "verbosity"]

SHELLS: Final = ("bash", "zsh", "fish")
LIBRARY_LOGGER: Final = "gguf_audit"


def _add_flags(parser: argparse.ArgumentParser, default: object) -> None:
    if any("--quiet" in a.option_strings for a in parser._actions):
        return
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="only errors and the result lines a script needs"
    )
    group.add_argument("-v", "--verbose", action="store_true", default=default, help="also the library's INFO logs")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, where a command's optional positional may also follow its options:
    ``sql OUT --run R "SQL"`` as ``sql OUT "SQL" --run R``. (argparse gives an optional positional nothing
    when the words before the first option end, and then refuses the word after the options.)"""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    command = next((a for a in argv if not a.startswith("-")), None)
    sub = _subcommands(parser).get(command or "")
    late = [
        a for a in (sub._actions if sub is not None else [])
        if not a.option_strings and a.nargs == "?" and getattr(args, a.dest, None) is None
    ]  # fmt: skip
    if len(extra) > len(late) or any(word.startswith("-") for word in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    for action, word in zip(late, extra, strict=False):
        setattr(args, action.dest, word)
    return args


def add_verbosity_flags(parser: argparse.ArgumentParser) -> None:
    """``-q`` and ``-v`` before the command and after it (a flag after it is kept only when given)."""
    _add_flags(parser, False)
    for sub in _subcommands(parser).values():
        _add_flags(sub, argparse.SUPPRESS)


@contextlib.contextmanager
def verbosity(args: argparse.Namespace) -> Iterator[None]:
    """While a command runs: quiet lets only errors through the library's loggers; verbose shows their INFO lines
    on standard error (redacted). Restored afterwards (tests run commands in one process)."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    level = logger.level
    handler: logging.Handler | None = None
    if getattr(args, "quiet", False):
        logger.setLevel(logging.ERROR)
    elif getattr(args, "verbose", False):
        logger.setLevel(logging.INFO)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("gguf-audit: %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(RedactFilter())
        logger.addHandler(handler)
    try:
        yield
    finally:
        logger.setLevel(level)
        if handler is not None:
            logger.removeHandler(handler)


@dataclass(frozen=True, slots=True)
class _Command:
    name: str
    summary: str
    options: tuple[str, ...]
    choices: dict[str, tuple[str, ...]]
    """Each option that takes one of a few values, and those values."""


def _options(parser: argparse.ArgumentParser) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    options: list[str] = []
    choices: dict[str, tuple[str, ...]] = {}
    for action in parser._actions:
        options += [o for o in action.option_strings if o.startswith("--") or len(o) == 2]
        if action.option_strings and action.choices is not None:
            for option in action.option_strings:
                choices[option] = tuple(str(c) for c in action.choices)
    return tuple(dict.fromkeys(options)), choices


def _commands(parser: argparse.ArgumentParser) -> list[_Command]:
    helps: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
    found = []
    for name, sub in sorted(_subcommands(parser).items()):
        options, choices = _options(sub)
        found.append(_Command(name, helps.get(name, ""), options, choices))
    return found


def _bash(parser: argparse.ArgumentParser, prog: str) -> str:
    commands = _commands(parser)
    top, _ = _options(parser)
    words = " ".join([c.name for c in commands] + list(top))
    values = []
    per_command = []
    for c in commands:
        for option, allowed in c.choices.items():
            values.append(f'        "{c.name}|{option}") words={shlex.quote(" ".join(allowed))} ;;')
        per_command.append(f'        "{c.name}") words={shlex.quote(" ".join(c.options))} ;;')
    function = "_" + prog.replace("-", "_")
    return "\n".join(
        [
            f"# {prog} completion for bash, generated by `{prog} completion bash` (static word lists).",
            f"{function}() {{",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" words="" i',
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac',
            "    done",
            '    case "$cmd|$prev" in',
            *values,
            "    esac",
            '    if [[ -z "$words" && -z "$cmd" ]]; then',
            f"        words={shlex.quote(words)}",
            '    elif [[ -z "$words" && "$cur" == -* ]]; then',
            '        case "$cmd" in',
            *per_command,
            "        esac",
            "    fi",
            '    [[ -n "$words" ]] && COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "    return 0",
            "}",
            f"complete -o default -F {function} {prog}",
            "",
        ]
    )


def _zsh(parser: argparse.ArgumentParser, prog: str) -> str:
    # zsh runs the bash function through its own bashcompinit: one set of word lists for both shells.
    head = f"# {prog} completion for zsh, generated by `{prog} completion zsh` (static word lists).\n"
    return head + "autoload -U +X bashcompinit && bashcompinit\n" + _bash(parser, prog)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish(parser: argparse.ArgumentParser, prog: str) -> str:
    lines = [f"# {prog} completion for fish, generated by `{prog} completion fish` (static word lists)."]
    commands = _commands(parser)
    for c in commands:
        lines.append(f"complete -c {prog} -f -n __fish_use_subcommand -a {c.name} -d {_fish_quote(c.summary)}")
    for c in commands:
        seen = f"'__fish_seen_subcommand_from {c.name}'"
        for option in c.options:
            flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            allowed = c.choices.get(option)
            values = f" -x -a {_fish_quote(' '.join(allowed))}" if allowed else ""
            lines.append(f"complete -c {prog} -n {seen} {flag}{values}")
    return "\n".join(lines) + "\n"


def completion_script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`): the parser's commands and their options."""
    prog = parser.prog
    if shell == "bash":
        return _bash(parser, prog)
    if shell == "zsh":
        return _zsh(parser, prog)
    return _fish(parser, prog)
