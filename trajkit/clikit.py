"""Shared pieces of the stage sub-commands: common options and one way to run a stage.

A stage's command is generated from its config model (``stage_command``): one
option per field, named after it, with the field's default and description; the
runner's own options (``--run``, ``--fresh``, ``--rank``, ...) come after.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import click
import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from pydantic import BaseModel

RunDir = Annotated[Path, typer.Option("--run", "-r", help="Run directory (created if missing).")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", help="YAML file with the stage's config.")]
Overrides = Annotated[
    list[str] | None, typer.Option("--set", help="Config override KEY=VALUE (YAML value); repeatable.")
]
Name = Annotated[str | None, typer.Option("--name", help="Stage name in the run (default: the command's name).")]
Fresh = Annotated[bool, typer.Option("--fresh", help="Delete this stage's output and start over.")]
MaxFailedCalls = Annotated[
    float,
    typer.Option("--max-failed-calls", help="The share of model calls that may fail before the stage fails (exit 2)."),
]
ReuseCache = Annotated[
    bool,
    typer.Option("--reuse-cache", help="With --fresh: reuse the model answers the run's call cache holds."),
]
RedoStale = Annotated[
    bool,
    typer.Option("--redo-stale", help="Redo this stage if what it read changed since it ran (else that is refused)."),
]
Rank = Annotated[int, typer.Option("--rank", help="This process's shard, 0-based.")]
WorldSize = Annotated[int, typer.Option("--world-size", help="Number of shards the stage is split into.")]
Executor = Annotated[
    str,
    typer.Option("--executor", help="local: run shard --rank here; ray: run all --world-size shards on a Ray cluster."),
]
Address = Annotated[
    str | None, typer.Option("--address", help="Ray cluster address (default: start a local one for the run).")
]
BudgetTokens = Annotated[int | None, typer.Option("--budget-tokens", help="Stop cleanly after this many tokens.")]
BudgetCost = Annotated[float | None, typer.Option("--budget-cost", help="Stop cleanly after this cost.")]


def plain_placeholders(command: click.Command) -> click.Command:
    """typer's help shows a Python type beside every option: ``<bool>`` beside a flag too, as though it took
    a value, and ``<list[str]>`` beside a repeatable option, as though it took a list. Through click's own
    ``metavar`` (which typer shows in its place), a flag (``--fresh``, ``--exact/--no-exact``, ``--help``)
    shows none and a repeatable option the type of one value, ``<str>...``; a group's commands alike.
    Older typers (``typer>=0.15`` is allowed) print click's metavars already, without a type beside a flag."""
    help_option = command.get_help_option(command.context_class(command))  # made once per command, then kept
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        # typer's own click or click itself: options by what they are, not by their class
        if getattr(param, "param_type_name", None) != "option" or param.metavar is not None:
            continue
        if param.is_flag:
            param.metavar = ""
        elif param.multiple and hasattr(param, "bare_type"):
            label = param.bare_type()
            param.metavar = f"<{label[5:-1]}>..." if label.startswith("list[") else None
    for sub in getattr(command, "commands", {}).values():
        plain_placeholders(sub)
    return command


def model_spec(
    model: str | None, backend: str | None = None, base_url: list[str] | None = None
) -> dict[str, Any] | None:
    """The ``model:`` mapping a stage config takes, from the common options (None if none given)."""
    if base_url is not None:
        base_url = base_url[0] if len(base_url) == 1 else base_url or None
    spec = {k: v for k, v in {"model": model, "backend": backend, "base_url": base_url}.items() if v is not None}
    return spec or None


def run_command(
    kind: str,
    run: Path,
    options: dict[str, Any],
    *,
    config: Path | None = None,
    overrides: list[str] | None = None,
    name: str | None = None,
    fresh: bool = False,
    redo_stale: bool = False,
    max_failed_calls: float = 0.5,
    reuse_cache: bool = False,
    rank: int = 0,
    world_size: int = 1,
    budget_tokens: int | None = None,
    budget_cost: float | None = None,
    executor: str = "local",
    address: str | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Build a stage's config from YAML, options and overrides, validate it, run the stage: its shard
    ``rank`` here (returns its manifest), or with ``executor="ray"`` all ``world_size`` shards on Ray
    (returns their manifests as ``shards`` and a reporting stage's ``summary`` over all of them)."""
    from trajkit.config import build, given_options, read_yaml
    from trajkit.errors import UserError
    from trajkit.runner import check_runner_options, run_stage
    from trajkit.stages import get_stage
    from trajkit.store import Store

    spec = get_stage(kind)
    from_file = read_yaml(config) if config else {}
    # ``--split null`` for a field that may be null: null, as ``--set split=null`` says (an unset option is None)
    nulls = [k for k, v in options.items() if v == "null" and _unwrap(spec.config.model_fields[k].annotation)[1]]
    options = {k: v for k, v in options.items() if k not in nulls}
    overrides = [*(overrides or []), *(f"{k}=null" for k in nulls)]
    cfg = build(spec.config, from_file, given_options(options), overrides=overrides, where=kind)
    if executor not in ("local", "ray"):
        raise UserError(f"--executor must be local or ray, not {executor!r}")
    if executor == "ray" and rank:
        raise UserError("--rank is for the local executor; --executor ray runs every shard")
    check_runner_options(rank, world_size, budget_tokens, budget_cost, max_failed_calls)
    if executor == "ray":
        from trajkit.executors.ray import run_on_ray

        name = name or spec.kind.split(".")[-1]
        return run_on_ray(
            run,
            spec,
            cfg,
            name,
            fresh,
            world_size,
            address,
            budget_tokens,
            budget_cost,
            redo_stale,
            max_failed_calls,
            reuse_cache,
        )
    store = Store(run, create=True)
    return run_stage(
        store,
        spec,
        cfg,
        name=name,
        fresh=fresh,
        rank=rank,
        world_size=world_size,
        budget_tokens=budget_tokens,
        budget_cost=budget_cost,
        redo_stale=redo_stale,
        max_failed_calls=max_failed_calls,
        reuse_cache=reuse_cache,
    )


# ---------------------------------------------------------------- options generated from a stage's config
RUNNER_PARAMS = ("run", "config", "overrides", "name", "fresh", "redo_stale", "rank", "world_size", "executor")
RUNNER_PARAMS += ("address", "max_failed_calls", "reuse_cache")
RUNNER_PARAMS += ("budget_tokens", "budget_cost")
_RUNNER_SIGNATURE = [
    ("run", RunDir, inspect.Parameter.empty),
    ("config", ConfigFile, None),
    ("overrides", Overrides, None),
    ("name", Name, None),
    ("fresh", Fresh, False),
    ("reuse_cache", ReuseCache, False),
    ("redo_stale", RedoStale, False),
    ("max_failed_calls", MaxFailedCalls, 0.5),
    ("rank", Rank, 0),
    ("world_size", WorldSize, 1),
    ("executor", Executor, "local"),
    ("address", Address, None),
    ("budget_tokens", BudgetTokens, None),
    ("budget_cost", BudgetCost, None),
]


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (annotation, False)."""
    args = get_args(annotation)
    if get_origin(annotation) in (Union, UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Union[tuple(rest)]), True  # noqa: UP007
    return annotation, False


def _scalar(annotation: Any) -> type | None:
    """The click-level type of a scalar field (Literal values as their type), or None if not a scalar."""
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        return type(values[0]) if len({type(v) for v in values}) == 1 else None
    return annotation if annotation in (str, int, float, bool) else None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and annotation.__name__ == "ModelSpec"


def _default_text(field: Any) -> str:
    if field.is_required():
        return "required unless in --config"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ", ".join(str(getattr(v, "name", v)) for v in value) or "none"
    return str(value)


def _help(field: Any, annotation: Any, how: str = "") -> str:
    """The field's description, its choices, ``how`` it is given and its default, e.g. ``How servers are
    drawn (uniform, list); default uniform.`` A field unset by default whose description says what that
    means (``(default: one per CPU)``) gets no ``default unset``; a required one ``required unless in --config``."""
    text = (field.description or "").rstrip(".")
    if get_origin(annotation) is Literal:
        text += f" ({', '.join(str(v) for v in get_args(annotation))})"
    text += how
    default = _default_text(field)
    if default == "unset" and "default" in text.lower():
        return f"{text}."
    tail = default if field.is_required() else f"default {default}"
    return f"{text}; {tail}." if text else f"{tail[0].upper()}{tail[1:]}."


def _pairs(items: list[str] | None, flag: str) -> dict[str, str] | None:
    """Repeated ``KEY=VALUE`` options as a mapping (the values validated by the config)."""
    if not items:
        return None
    from trajkit.errors import UserError

    out = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise UserError(f"{flag} {item!r} is not KEY=VALUE")
        if out.get(key, value) != value:
            raise UserError(f"{flag} {key} given twice ({out[key]!r}, {value!r})")
        out[key] = value
    return out


def _stage_fields_first(config: type[BaseModel]) -> list[tuple[str, Any]]:
    """The config's fields, those the stage declares itself before those of the shared bases it extends
    (pydantic lists a base's fields first): ``--help`` opens with what is particular to the stage."""
    own = [name for name in vars(config).get("__annotations__", {}) if name in config.model_fields]
    rest = [name for name in config.model_fields if name not in own]
    return [(name, config.model_fields[name]) for name in own + rest]


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def config_options(
    config: type[BaseModel], aliases: dict[str, list[str]]
) -> tuple[list[tuple[str, Any]], dict[str, Callable[[dict[str, Any]], Any]]]:
    """Typer parameters for the fields of ``config`` that a flag can set, and how each field's value is read back.

    Scalars and lists of scalars become options named after the field (plus declared aliases);
    a ``ModelSpec`` field ``x_model`` becomes ``--x-model``, ``--x-backend`` and ``--x-base-url``
    (``--model/--backend/--base-url`` for ``model``, ``--model`` repeatable for ``models``);
    a mapping of scalars is a repeatable ``--field KEY=VALUE``; nested fields, pairs and other
    mappings are set with ``--set`` (or in the YAML file) only.
    """
    import pydantic

    params: list[tuple[str, Any]] = []
    readers: dict[str, Callable[[dict[str, Any]], Any]] = {}
    for field_name, field in _stage_fields_first(config):
        annotation, _ = _unwrap(field.annotation)
        origin = get_origin(annotation)
        item = get_args(annotation)[0] if origin is list else None
        if _is_model(annotation) or (item is not None and _is_model(item)):
            params += _model_params(field_name, field, many=item is not None)
            readers[field_name] = _model_reader(field_name, many=item is not None)
            continue
        if origin is dict and (_scalar(get_args(annotation)[1]) is not None or get_args(annotation)[1] is Any):
            help_text = _help(field, annotation, " (KEY=VALUE, repeatable)")
            decls = [_flag(field_name), *aliases.get(field_name, [])]
            params.append((f"f_{field_name}", Annotated[list[str] | None, typer.Option(*decls, help=help_text)]))
            readers[field_name] = lambda values, key=f"f_{field_name}", flag=decls[-1]: _pairs(values[key], flag)
            continue
        if item is not None and isinstance(item, type) and issubclass(item, pydantic.BaseModel):
            item = str  # a model read from a string (its validator parses it), e.g. curate decontaminate --eval
        scalar = _scalar(item if item is not None else annotation)
        if scalar is None:
            continue
        decls = [_flag(field_name), *aliases.get(field_name, [])]
        if scalar is bool and item is None:
            decls = [f"{d}/--no-{d[2:]}" for d in decls[:1]] + decls[1:]
        kind = list[scalar] if item is not None else scalar
        help_text = _help(field, item if item is not None else annotation)
        if item is not None:
            help_text += " Repeatable."
        params.append((f"f_{field_name}", Annotated[kind | None, typer.Option(*decls, help=help_text)]))
        # an empty list (a repeatable flag not given) is unset; False and 0 are values
        readers[field_name] = lambda values, key=f"f_{field_name}": values[key] if values[key] != [] else None
    return params, readers


def _model_params(field_name: str, field: Any, many: bool) -> list[tuple[str, Any]]:
    prefix = field_name.removesuffix("models").removesuffix("model")
    flag = _flag(prefix)[2:]
    described = (field.description or "The model").rstrip(".")
    names = [f"--{flag}model"] + (["-m"] if not prefix else [])
    what = "; repeat to compare models" if many else ""
    return [
        (
            f"m_{prefix}model",
            Annotated[
                list[str] | None if many else str | None,
                typer.Option(*names, help=f"{described}: a local directory, Hub id or served name{what}."),
            ],
        ),
        (
            f"m_{prefix}backend",
            Annotated[str | None, typer.Option(f"--{flag}backend", help="transformers, openai or vllm.")],
        ),
        (
            f"m_{prefix}base_url",
            Annotated[
                list[str] | None,
                typer.Option(f"--{flag}base-url", help="OpenAI-compatible endpoint (backend openai); repeatable."),
            ],
        ),
    ]


def _model_reader(field_name: str, many: bool) -> Callable[[dict[str, Any]], Any]:
    prefix = field_name.removesuffix("models").removesuffix("model")

    def read(values: dict[str, Any]) -> Any:
        model, backend, base_url = (values[f"m_{prefix}{k}"] for k in ("model", "backend", "base_url"))
        if many:
            return [model_spec(m, backend, base_url) for m in model] if model else None
        return model_spec(model, backend, base_url)

    return read


class StageCommand(TyperCommand):
    """A stage's command: old flag names that went away fail with one line naming the new one."""

    renamed: ClassVar[dict[str, str]] = {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from trajkit.errors import UserError

        for arg in args:
            if arg == "--":
                break
            old = arg.split("=", 1)[0]
            if old in self.renamed:
                raise UserError(f"{old} is now {self.renamed[old]} (see --help)")
        return super().parse_args(ctx, args)


# options whose value is a path: an empty one would mean the current directory ("-r $RUN" with RUN unset)
PATH_FLAGS = {"-r", "--run", "-c", "--config", "-o", "--output", "-p", "--path", "-s", "--servers"}
PATH_FLAGS |= {"--completions", "--output-dir", "--keep-env-state", "--pipeline", "--replay", "--tokenizer"}


class TopGroup(TyperGroup):
    """The ``trajkit`` group: a command line click cannot parse (an unknown option, a value of the wrong
    type) and a file-system error on a path the user gave or a run directory holds (a folder where a
    file belongs, a read-only or full disk, a missing parent) are user errors: one line. A command that
    stops on one (or on a missing sandbox protection) leaves no run folder it created and wrote nothing to."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        plain_placeholders(self)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from trajkit.errors import UserError

        for flag, value in zip(args, [*args[1:], None]):
            if flag == "--":
                break
            name, eq, inline = flag.partition("=")
            if name in PATH_FLAGS and (inline if eq else value) == "":
                raise UserError(f"{name} is empty: give a path (an unset shell variable?)")
        with _user_errors():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from trajkit.confine.isolation import ProtectionMissing
        from trajkit.errors import UserError

        made = len(store.CREATED_RUNS) if (store := _store_module()) else 0
        try:
            with _user_errors():
                return super().invoke(ctx)
        except KeyboardInterrupt:  # typer turns it into exit status 130 without a word
            typer.echo("interrupted; rerun the same command to resume", err=True)
            raise
        except (UserError, ProtectionMissing):
            if store := _store_module():
                store.remove_new_empty_runs(since=made)
            raise


def _store_module() -> Any:
    """``trajkit.store`` where it is loaded, else None (then no run folder was made): a usage error or
    ``--help`` imports no pyarrow."""
    import sys

    return sys.modules.get("trajkit.store")


# click's UsageError as the installed typer raises it (recent typers carry their own copy of click)
USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    from trajkit.errors import UserError

    try:
        yield
    except USAGE_ERROR as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a group called bare shows its help
            raise
        where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
        raise UserError(" ".join(e.format_message().split()).rstrip(".") + where) from None
    except OSError as e:
        if e.filename is None or e.strerror is None:
            raise
        raise UserError(f"{e.filename}: {e.strerror}") from None


class StageGroup(TyperGroup):
    """A group whose stage commands are built from their configs when first asked for,
    so ``trajkit --help`` and the other commands import no stage module."""

    builders: ClassVar[dict[str, Callable[[], click.Command]]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.builders, *super().list_commands(ctx)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.builders:
            return plain_placeholders(self.builders[name]())
        return super().get_command(ctx, name)


def stage_app() -> typer.Typer:
    """A sub-app (``synth``, ``curate``, ``eval``) to add stage commands to with ``stage_command``."""
    app = typer.Typer(no_args_is_help=True, cls=type("StageGroup", (StageGroup,), {"builders": {}}))
    app.callback()(_no_options)  # a group even before its commands are built (tests invoke the sub-app itself)
    return app


def _no_options() -> None:
    """The sub-app takes no options of its own."""


def stage_command(
    app: typer.Typer,
    kind: str,
    *,
    command: str | None = None,
    aliases: dict[str, list[str]] | None = None,
    renamed: dict[str, str] | None = None,
    default_name: str | None = None,
    report: Callable[[Any], None] | None = None,
) -> None:
    """Add ``kind``'s command to ``app`` (made by ``stage_app``): its config's fields as options, then
    the runner's options, its help the stage's own (``StageSpec.help``); the command is built when first used.

    ``aliases``: extra flag names per field (the short names of the README's flag table);
    ``renamed``: old flag -> its new name, for the one-line error; ``report``: prints the result.
    """
    name = command or kind.split(".")[-1]

    @functools.cache
    def build() -> click.Command:
        single = typer.Typer(add_completion=False)
        cls = type(f"{kind}Command", (StageCommand,), {"renamed": renamed or {}})
        single.command(name, cls=cls)(_stage_main(kind, aliases or {}, default_name, report))
        return typer.main.get_command(single)

    app.info.cls.builders[name] = build


def _stage_main(
    kind: str,
    aliases: dict[str, list[str]],
    default_name: str | None,
    report: Callable[[Any], None] | None,
) -> Callable[..., None]:
    """The command's function, its signature made from the config's fields and the runner's options."""
    from trajkit.stages import get_stage

    spec = get_stage(kind)
    fields, readers = config_options(spec.config, aliases)

    def main(**values: Any) -> None:
        options = {field: read(values) for field, read in readers.items()}
        runner = {k: values[k] for k in RUNNER_PARAMS}
        runner["name"] = runner["name"] or default_name
        result = run_command(kind, runner.pop("run"), options, **runner)
        if report is not None:
            report(result)

    P = inspect.Parameter
    parameters = [P(n, P.KEYWORD_ONLY, annotation=a, default=d) for n, a, d in _RUNNER_SIGNATURE[:1]]
    parameters += [P(n, P.KEYWORD_ONLY, annotation=a, default=None) for n, a in fields]
    parameters += [P(n, P.KEYWORD_ONLY, annotation=a, default=d) for n, a, d in _RUNNER_SIGNATURE[1:]]
    main.__signature__ = inspect.Signature(parameters)
    main.__annotations__ = {p.name: p.annotation for p in parameters}
    main.__doc__ = spec.help
    return main
