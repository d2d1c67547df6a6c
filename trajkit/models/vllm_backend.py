"""The ``vllm`` backend: vLLM's in-process engine (``vllm.LLM``), for GPU machines; the ``vllm`` extra.

Prompts are rendered with the model's own chat template (``tools=``
included) and passed as token ids, so the prompt tokens are known exactly.
Concurrent calls are gathered into one ``LLM.generate`` call, run in a worker
thread. Each call asks for the logprob of every sampled token
(``logprobs=0``); the engine defaults to ``logprobs_mode="processed_logprobs"``
(after temperature and top-p, like the transformers backend) unless
``engine_args`` says otherwise. A seeded request for ``n`` samples goes to the
engine as ``n`` one-sample requests, sample j seeded ``base.sample_seed(seed, j)``
as the transformers backend seeds it (vLLM itself would derive the seeds of
one n-sample request its own way); the engine's prefix cache shares their prompt.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trajkit.errors import UserError
from trajkit.models.base import Backend, Completion, Message, ModelSpec, SamplingParams, ToolSchema, sample_seed
from trajkit.models.batching import Batcher
from trajkit.models.chat import RenderError, decode_completion, failed, render_prompt

MISSING = "the vllm backend needs the vllm extra: pip install 'trajkit[vllm]'"


class VLLMBackend(Backend):
    """Batched generation with an in-process vLLM engine; the engine starts on the first call."""

    name = "vllm"

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        try:
            import vllm
        except ImportError:
            raise UserError(MISSING) from None
        self._vllm = vllm
        self._llm: Any = None
        self._tokenizer: Any = None
        self._load_lock = threading.Lock()
        self._load: asyncio.Future | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trajkit-vllm")
        self.batcher = Batcher(self._run, self._executor)

    def engine_args(self) -> dict[str, Any]:
        """The arguments ``vllm.LLM`` is built with."""
        args: dict[str, Any] = {"model": self.spec.model, "logprobs_mode": "processed_logprobs"}
        if self.spec.dtype:
            args["dtype"] = self.spec.dtype
        return {**args, **self.spec.engine_args}

    def llm(self) -> Any:
        """The engine (started on first use)."""
        with self._load_lock:
            if self._llm is None:
                llm = self._vllm.LLM(**self.engine_args())
                self._tokenizer = llm.get_tokenizer()
                self._llm = llm
            return self._llm

    def _loading(self) -> asyncio.Future:
        """One engine start for every caller waiting on it, so they all resume (and batch) together."""
        loop = asyncio.get_running_loop()
        if self._load is None or self._load.get_loop() is not loop:
            self._load = asyncio.ensure_future(loop.run_in_executor(self._executor, self.llm))
        return asyncio.shield(self._load)

    def sampling_params(self, params: SamplingParams) -> list[Any]:
        """vLLM's sampling params for a request: one per sample when seeded (sample j seeded
        ``sample_seed(seed, j)``), else one for all ``n``."""
        seeds = [None] if params.seed is None else [sample_seed(params.seed, j) for j in range(params.n)]
        return [
            self._vllm.SamplingParams(
                n=params.n if seed is None else 1,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                stop=list(params.stop) if params.stop else None,
                seed=seed,
                logprobs=0,
            )
            for seed in seeds
        ]

    async def _generate(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams
    ) -> list[Completion]:
        # every call waits on the one load (a done one returns at once): a call that saw the
        # engine set by the loading thread would otherwise run ahead of those still waiting
        await self._loading()
        try:
            text = render_prompt(self._tokenizer, messages, tools, **self.spec.chat_template_kwargs)
        except RenderError as e:
            return failed(params.n, str(e))
        prompt = list(self._tokenizer.encode(text, add_special_tokens=False))
        requests = [({"prompt_token_ids": prompt}, p) for p in self.sampling_params(params)]
        try:
            results = await asyncio.gather(*(self.batcher.submit(r) for r in requests))
        except Exception as e:  # noqa: BLE001 - a failed engine call is data for this request
            return failed(params.n, f"{type(e).__name__}: {e}")
        outputs = [out for result in results for out in sorted(result.outputs, key=lambda o: o.index)]
        return [self._completion(prompt, out, tools) for out in outputs]

    def _completion(self, prompt: list[int], out: Any, tools: list[ToolSchema] | None) -> Completion:
        ids = list(out.token_ids)
        logprobs = None
        if out.logprobs is not None:
            logprobs = [float(step[token].logprob) for step, token in zip(out.logprobs, ids)]
        stop_string = out.stop_reason if isinstance(out.stop_reason, str) else None
        finish = out.finish_reason or "stop"
        return decode_completion(
            self._tokenizer,
            prompt,
            ids,
            logprobs,
            finish,
            tools,
            ends_with_stop_token=finish == "stop" and stop_string is None,
            stop_string=stop_string,
        )

    def _run(self, requests: list[tuple[dict, Any]]) -> list[Any]:
        prompts = [prompt for prompt, _ in requests]
        params = [p for _, p in requests]
        return self._llm.generate(prompts, sampling_params=params, use_tqdm=False)

    async def aclose(self) -> None:
        self.batcher.close()
        self._executor.shutdown(wait=False)
