"""Stage options come from the config models: every field is reachable as a flag or with --set,
removed flag names fail with one line naming the new one, and --help shows the defaults."""

from __future__ import annotations

import functools
import re
import typing

import click
import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from tests.test_cli import trajkit
from trajkit import clikit
from trajkit.cli import app
from trajkit.config import build
from trajkit.errors import UserError
from trajkit.stages import get_stage

COMMANDS = {  # every stage command generated from its config
    "synth": ["harvest", "tasks", "rollouts", "judge", "filter", "extend"],
    "curate": ["import", "verify", "traces", "passk", "dedup", "decontaminate", "filter", "split", "curriculum"],
    "eval": ["passk", "tools", "diversity"],
}
STAGES = [(group, command) for group, commands in COMMANDS.items() for command in commands]


def _command(group: str, name: str) -> click.Command:
    return _cli().commands[group].get_command(None, name)


def _sample(annotation: typing.Any) -> tuple[str, typing.Any]:
    """A command-line value for a scalar annotation, and the value the config receives."""
    annotation, _ = clikit._unwrap(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        value = typing.get_args(annotation)[-1]
        return str(value), value
    return {int: ("3", 3), float: ("0.5", 0.5), str: ("x", "x")}[annotation]


class Captured(Exception):
    """Raised in place of running the stage."""


@functools.cache
def _cli() -> click.Command:
    return typer.main.get_command(app)  # built once: the tests invoke it hundreds of times


def _invoke(args: list[str], monkeypatch) -> dict[str, typing.Any]:
    """The options and runner arguments the command passes to run_command (nothing is run)."""
    seen: dict[str, typing.Any] = {}

    def capture(kind: str, run: typing.Any, options: dict[str, typing.Any], **runner: typing.Any) -> None:
        seen.update(options, **runner)
        raise Captured

    monkeypatch.setattr(clikit, "run_command", capture)
    with pytest.raises(Captured):
        _cli().main(args, prog_name="trajkit", standalone_mode=False)
    return seen


@pytest.mark.parametrize(("group", "name"), STAGES)
def test_every_config_field_is_a_flag_or_set(group, name, tmp_path, monkeypatch):
    kind = f"{group}.{name}"
    config = get_stage(kind).config
    flags = {opt: param for param in _command(group, name).params for opt in param.opts}
    base = ["--run", str(tmp_path)]
    set_only = []
    for field_name, field in config.model_fields.items():
        flag = "--" + field_name.replace("_", "-")
        annotation, _ = clikit._unwrap(field.annotation)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if clikit._is_model(annotation) or (origin is list and clikit._is_model(args[0])):
            prefix = "--user-" if field_name == "user_model" else "--"
            seen = _invoke([group, name, *base, f"{prefix}model", "M", f"{prefix}backend", "openai"], monkeypatch)
            spec = {"model": "M", "backend": "openai"}
            assert seen[field_name] == ([spec] if field_name == "models" else spec)
        elif flag not in flags:
            set_only.append(field_name)
        elif origin is dict:
            assert _invoke([group, name, *base, flag, "a=1", flag, "b=2"], monkeypatch)[field_name] == {
                "a": "1",
                "b": "2",
            }
        elif origin is list:
            item = args[0] if not (isinstance(args[0], type) and issubclass(args[0], BaseModel)) else str
            text, value = _sample(item) if item is not str else ("humaneval", "humaneval")
            assert _invoke([group, name, *base, flag, text, flag, text], monkeypatch)[field_name] == [value, value]
        elif annotation is bool:
            assert _invoke([group, name, *base, f"--no-{flag[2:]}"], monkeypatch)[field_name] is False
            assert _invoke([group, name, *base, flag], monkeypatch)[field_name] is True
        else:
            text, value = _sample(annotation)
            assert _invoke([group, name, *base, flag, text], monkeypatch)[field_name] == value
        assert field.description or field_name in set_only or flag in flags
    for field_name in set_only:  # a nested, pair or mapping field: --set reaches it with its default as YAML
        field = config.model_fields[field_name]
        default = field.get_default(call_default_factory=True)
        value = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
        override = f"{field_name}={_yaml(value)}"
        seen = _invoke([group, name, *base, "--set", override], monkeypatch)
        assert seen["overrides"] == [override]
        required = {  # the required fields: a model, a list of models, or a string
            n: {"model": "m"} if n == "model" else [{"model": "m"}] if n == "models" else "x"
            for n, f in config.model_fields.items()
            if f.is_required()
        }
        assert getattr(build(config, required, overrides=[override]), field_name) == getattr(
            build(config, required), field_name
        )


def _yaml(value: typing.Any) -> str:
    import json

    return json.dumps(value)


def test_a_removed_flag_names_the_new_one(tmp_path):
    result = CliRunner().invoke(app, ["curate", "dedup", "--run", str(tmp_path), "--cluster-only"])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == "--cluster-only is now --no-reject-near-duplicates (see --help)"
    proc = trajkit("curate", "dedup", "--run", str(tmp_path), "--reject-near", check=False)
    assert proc.returncode == 2
    assert proc.stderr == "error: --reject-near is now --reject-near-duplicates (see --help)\n"
    assert not (tmp_path / "_stages").exists()


def test_help_shows_flags_without_a_type_and_repeatable_options_by_one_value():
    """typer's own placeholders read as a value to give: ``<bool>`` beside a flag, ``<list[str]>``."""

    def rows(*args: str) -> dict[str, str]:
        out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "250"}).output
        assert "<bool>" not in out and "<list[" not in out, out
        return {line.split()[1].split(",")[0]: line for line in out.splitlines() if line.startswith("│ ")}

    top, dedup, push = rows(), rows("curate", "dedup"), rows("push")
    assert "<" not in top["--allow-weaker-sandbox"] and "<path>" in top["--keep-env-state"]
    assert "<" not in dedup["--fresh"] and "<" not in dedup["--exact"] and "<" not in dedup["--help"]
    assert "<str>..." in dedup["--set"] and "<" not in push["--dry-run"]


def test_help_shows_every_default_and_the_short_names():
    out = CliRunner().invoke(app, ["synth", "tasks", "--help"], env={"COLUMNS": "250"}).output
    assert "--requests-per-mode,--requests" in out and "Generation requests per mode; default 10." in out
    assert "(direct, vs_standard, vs_cot, vs_multi); default vs_standard." in out
    assert "--n " in CliRunner().invoke(app, ["synth", "rollouts", "--help"], env={"COLUMNS": "250"}).output
    for group, name in STAGES:
        config = get_stage(f"{group}.{name}").config
        text = CliRunner().invoke(app, [group, name, "--help"], env={"COLUMNS": "250"}).output
        out = " ".join(text.split("─ Options ─", 1)[1].split())
        for field_name in config.model_fields:
            flag = "--" + field_name.replace("_", "-")
            if flag in out and not clikit._is_model(clikit._unwrap(config.model_fields[field_name].annotation)[0]):
                row = re.search(rf"(?<![\w-]){flag}(?![\w-])(.*?)(│ │ (\* )?--|╰)", out)
                said = row and row.group(1).lower()
                assert said and ("default" in said or "required unless in --config" in said), (group, name, flag)
                # said once: not "(default: one per CPU); default unset", nor "default required unless ..."
                assert not re.search(r"default:.*default unset|default required", row.group(1)), row.group(1)


def test_each_stage_has_one_help_text_and_its_command_shows_it():
    """A generated command's help is its stage's ``StageSpec.help``; a stage whose command is written by hand
    (card, train sft, train grpo) or that has none (the demo's warm-up) sets no second text on its spec."""
    from trajkit.stages import REGISTRY

    for group, name in STAGES:
        spec = get_stage(f"{group}.{name}")
        assert spec.help and _command(group, name).help == spec.help, (group, name)
    generated = {f"{group}.{name}" for group, name in STAGES}
    for kind in [*REGISTRY, "trajkit.demo.warmup:WARMUP"]:
        assert bool(get_stage(kind).help) == (kind in generated), kind


def test_help_in_a_pipe_cuts_no_option_name():
    """Piped (``trajkit synth tasks --help | less``), rich's 80 columns cut ``--requests-per-mode,--req…``."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    cmd = [sys.executable, "-m", "trajkit.cli", "synth", "tasks", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    assert "--requests-per-mode,--requests" in out and "…" not in out
