"""The ``transformers`` backend: any local Hugging Face causal LM, CPU or GPU, batched.

Concurrent ``generate`` calls are gathered into batches: each call renders its
prompt with the model's own chat template (``tools=`` included), puts one row
per sample on a queue, and a batcher task hands the queued rows to the
decoder (``trajkit.models.decode``) in a worker thread, so the event loop stays
free while the model runs. Rows that arrive during a batch form the next one.
Token ids (prompt and completion) and the logprobs of the sampled tokens are
always returned.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trajkit.errors import UserError
from trajkit.models.base import Backend, Completion, Message, ModelSpec, SamplingParams, ToolSchema
from trajkit.models.batching import Batcher
from trajkit.models.chat import RenderError, decode_completion, failed, render_prompt

# One load at a time in the process: transformers' lazy imports and from_pretrained (which sets the default
# device to meta while it builds the model) are not thread-safe, and each backend loads in its own thread.
_LOAD_LOCK = threading.Lock()


class LocalModel:
    """A loaded model and tokenizer, and what turns conversations into rows and rows into completions."""

    def __init__(self, spec: ModelSpec):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trajkit.models.attention import guard_sdpa_padding
        from trajkit.models.decode import Decoder
        from trajkit.models.heap import keep_freed_memory

        guard_sdpa_padding()
        keep_freed_memory()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(spec.model)
            dtype = getattr(torch, spec.dtype) if spec.dtype and spec.dtype != "auto" else "auto"
            model = AutoModelForCausalLM.from_pretrained(spec.model, dtype=dtype)
        except (OSError, ValueError, AttributeError) as e:
            raise UserError(f"cannot load model {spec.model!r}: {str(e).splitlines()[0]}") from None
        device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(device).eval()
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.decoder = Decoder(self.model, self.tokenizer, eos_ids, pad if pad is not None else min(eos_ids, default=0))
        self.template_kwargs = dict(spec.chat_template_kwargs)

    def prompt_ids(self, messages: list[Message], tools: list[ToolSchema] | None) -> tuple[int, ...]:
        text = render_prompt(self.tokenizer, messages, tools, **self.template_kwargs)
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def completion(self, prompt: tuple[int, ...], out: Any, tools: list[ToolSchema] | None) -> Completion:
        ids = out.token_ids
        return decode_completion(
            self.tokenizer,
            list(prompt),
            ids,
            out.logprobs,
            out.finish_reason,
            tools,
            ends_with_stop_token=bool(ids) and ids[-1] in self.decoder.eos_ids,
            stop_string=out.stop_string,
        )


class TransformersBackend(Backend):
    """Batched local generation; the model loads on the first call."""

    name = "transformers"

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self._local: LocalModel | None = None
        self._load: asyncio.Future | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajkit-model")
        self.batcher = Batcher(lambda rows: self.local().decoder.run(rows), self._executor, spec.max_batch_size)

    def local(self) -> LocalModel:
        """The loaded model (loading it on first use)."""
        with _LOAD_LOCK:
            if self._local is None:
                self._local = LocalModel(self.spec)
            return self._local

    def _loading(self) -> asyncio.Future:
        """One load for every caller waiting on it, so they all resume (and batch) together."""
        loop = asyncio.get_running_loop()
        if self._load is None or self._load.get_loop() is not loop:
            self._load = asyncio.ensure_future(loop.run_in_executor(self._executor, self.local))
        return asyncio.shield(self._load)

    async def _generate(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams
    ) -> list[Completion]:
        from trajkit.models.decode import Row, row_seed

        local = self._local or await self._loading()
        try:
            prompt = local.prompt_ids(messages, tools)
        except RenderError as e:
            return failed(params.n, str(e))
        stop = tuple(params.stop or ())
        rows = [
            Row(prompt, params.max_tokens, params.temperature, params.top_p, row_seed(params.seed, i), stop)
            for i in range(params.n)
        ]
        try:
            outs = await asyncio.gather(*(self.batcher.submit(r) for r in rows))
        except Exception as e:  # noqa: BLE001 - a failed batch (e.g. out of memory) is data for this call
            return failed(params.n, f"{type(e).__name__}: {e}")
        return [local.completion(prompt, o, tools) for o in outs]

    async def aclose(self) -> None:
        self.batcher.close()
        self._executor.shutdown(wait=False)
