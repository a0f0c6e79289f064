"""The documents name only commands and options that exist: every ``omni-fsm SUBCOMMAND`` in ``README.md``,
``docs/*.md`` and the docstrings of ``omni_fsm`` and ``omni_runtime`` is a subcommand of ``omni-fsm``'s parser,
and every ``--option`` given to ``omni-fsm ...`` or ``omni-run ...`` there is one its parser accepts.

The parsers are the installed commands' own (``[project.scripts]`` in ``pyproject.toml`` names their modules).
A command is read where the text shows code: a markdown code block (a mermaid diagram is none) or inline code,
or a docstring's ````...````; a subcommand is read in prose too. A standalone ``--option`` in the docstring of a
command's own module is that command's.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("omni_fsm", "omni_runtime")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``omni-fsm`` or ``omni-run`` as a command: not inside a path (``~/.cache/omni-fsm/x``) or a package name
#: (``omni-fsm[ray]``)
COMMAND = re.compile(r"(?<![\w/.-])omni-(fsm|run)(?![\w/\[-])(.*)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
SHELL_END = re.compile(r"\s(?:\||&&|;|2?>|#)(?:\s|$)")  #: where a command line stops: a pipe, a redirection, ...


def _module_of(script: str) -> str:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    return str(scripts[script]).split(":")[0]


@functools.cache
def parser(script: str) -> argparse.ArgumentParser:
    """Return the argument parser of the installed command ``script``."""
    built: argparse.ArgumentParser = importlib.import_module(_module_of(script)).build_parser()
    return built


def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(a.choices) for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def options(p: argparse.ArgumentParser) -> set[str]:
    return {flag for action in p._actions for flag in action.option_strings}


class Text:
    """One document or docstring: where it is, and its text."""

    def __init__(self, where: str, text: str, markdown: bool, module: str = "") -> None:
        self.where, self.text, self.markdown, self.module = where, text, markdown, module

    def prose(self) -> str:
        """Return the text without its mermaid diagrams (their titles name no command)."""
        return FENCE.sub(lambda m: "" if m.group(1) == "mermaid" else m.group(0), self.text) if self.markdown \
            else self.text  # fmt: skip

    def code(self) -> Iterator[str]:
        """Yield each piece of code the text shows: a code block's lines (continuations joined), inline code."""
        if not self.markdown:
            yield from re.findall(r"``(.+?)``", self.text, re.S)
            return
        for block in FENCE.finditer(self.text):
            if block.group(1) != "mermaid":
                yield from block.group(2).replace("\\\n", " ").splitlines()
        yield from re.findall(r"`([^`\n]+)`", FENCE.sub("", self.text))


def _texts() -> Iterator[Text]:
    for doc in DOCS:
        yield Text(str(doc.relative_to(ROOT)), doc.read_text(encoding="utf-8"), markdown=True)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=False)
                    name = getattr(node, "name", "")
                    if doc:
                        yield Text(f"{path.relative_to(ROOT)}{':' + name if name else ''}", doc, False, module)


TEXTS = list(_texts())


def named_subcommands(text: Text) -> Iterator[str]:
    """Yield every word that follows ``omni-fsm`` in the text (a subcommand, if anything)."""
    for found in COMMAND.finditer(text.prose()):
        word = re.match(r"\s([a-z][a-z-]*)", found.group(2))
        if found.group(1) == "fsm" and word:
            yield word.group(1)


def given_options(text: Text) -> Iterator[tuple[str, str, str]]:
    """Yield (command, option, the command line) for every ``--option`` given to ``omni-fsm``/``omni-run``."""
    for code in text.code():
        for found in COMMAND.finditer(code):
            words = SHELL_END.split(found.group(2))[0].split()
            command = f"omni-{found.group(1)}"
            if command == "omni-fsm" and words and words[0] in subcommands(parser(command)):
                command += f" {words[0]}"
            for word in words:
                option = OPTION.match(word.lstrip("[("))
                if option:
                    yield command, option.group(1), found.group(0)


def accepted(command: str) -> set[str]:
    """Return the options ``command`` (``omni-run``, ``omni-fsm`` or ``omni-fsm SUB``) accepts."""
    script, *sub = command.split()
    top = parser(script)
    return options(top) | (options(subcommands(top)[sub[0]]) if sub else set())


@pytest.mark.parametrize("text", [pytest.param(t, id=t.where) for t in TEXTS if "omni-fsm" in t.text])
def test_every_omni_fsm_subcommand_named_exists(text: Text) -> None:
    real = subcommands(parser("omni-fsm"))
    assert [word for word in named_subcommands(text) if word not in real] == [], (
        f"{text.where} names an omni-fsm subcommand that does not exist (there are: {', '.join(real)})")


@pytest.mark.parametrize("text", [pytest.param(t, id=t.where) for t in TEXTS if re.search(r"omni-(fsm|run)", t.text)])
def test_every_option_given_to_a_command_exists(text: Text) -> None:
    unknown = [f"{command} {option} (in {line!r})" for command, option, line in given_options(text)
               if option not in accepted(command)]
    assert unknown == [], f"{text.where} gives options the command does not take: {unknown}"


def _command_modules() -> dict[str, str]:
    """Return module -> the command it builds (``omni-fsm``'s subcommand modules are ``omni-fsm SUB``'s)."""
    modules = {_module_of(script): script for script in ("omni-fsm", "omni-run")}
    cli = importlib.import_module(_module_of("omni-fsm"))
    modules.update({module: f"omni-fsm {name}" for name, (module, _, _) in cli.SUBCOMMANDS.items()})
    return modules


@pytest.mark.parametrize("module, command", _command_modules().items())
def test_a_command_modules_docstrings_name_its_own_options(module: str, command: str) -> None:
    said = {option for text in TEXTS if text.module == module for code in text.code()
            if "-->" not in code for option in OPTION.findall(code)}  # an arrow (``--event [guard]-->``) is no option
    assert said - accepted(command) == set(), f"{module}'s docstrings name options {command} does not take"


def test_the_scan_finds_the_commands_it_judges() -> None:
    """The patterns still see what they judge: commands, subcommands and options across the texts."""
    subs = {word for text in TEXTS for word in named_subcommands(text)}
    assert subs == set(subcommands(parser("omni-fsm")))  # every subcommand is documented somewhere
    given = {(command, option) for text in TEXTS for command, option, _ in given_options(text)}
    assert ("omni-fsm check", "--allow-incomplete") in given and ("omni-run", "--trace") in given
    assert "compare" not in subcommands(parser("omni-fsm"))
