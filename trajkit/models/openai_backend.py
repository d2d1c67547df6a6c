"""The ``openai`` backend: any OpenAI-compatible chat endpoint over HTTP (httpx).

vLLM and SGLang servers, ``transformers serve``, hosted APIs. Bounded
concurrency, requests- and tokens-per-minute limits, retries with exponential
backoff (honouring ``Retry-After``) on 429, 408, 5xx, timeouts and connection
errors, and a timeout per request. The API key and extra headers are read from
the environment variables the spec names; they go into request headers only,
never into errors, logs, manifests or cache keys. A request that still fails
after the retries comes back as completions with ``error`` set: data, not an
exception. So does a response that is not the shape the API promises (choices
that are not objects, a null logprob, ...): ``malformed response: ...``.

Tool calls come from the response's ``tool_calls`` and, for servers that
return raw text, from ``<tool_call>`` blocks in the content. Logprobs are read
when the server returns them (``spec.logprobs``), token ids when it returns
vLLM's ``prompt_token_ids``/``token_ids`` (``extra_body: {return_token_ids: true}``).

``base_url`` may list several endpoints serving the same model (one ``vllm
serve`` per GPU node): each request goes to the endpoint with the fewest
requests outstanding; an endpoint that times out, refuses the connection or
answers 429/5xx is taken out for ``endpoint_backoff_s`` (doubling while it
keeps failing) and the retry goes elsewhere. Per-endpoint requests, errors
and seconds are counted into the ``stats`` mapping the stage's usage hands in
(the manifest's ``usage.endpoints``). ``served`` asks each endpoint which model
it serves (``/v1/models``): the stage records it (``usage.served``) and refuses
to mix models.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from trajkit.errors import UserError
from trajkit.models.base import Backend, Completion, Message, ModelSpec, SamplingParams, ToolSchema
from trajkit.models.chat import failed, to_openai, with_tool_media
from trajkit.models.parsing import parse_openai_tool_calls, parse_tool_calls, split_reasoning
from trajkit.models.ratelimit import RateLimiter
from trajkit.redact import clean_endpoint

_RETRY_STATUS = {408, 409, 429}
CONNECTIONS_PER_CLIENT = 8  # connections per httpx client of an endpoint (its pool scan is linear in them)
_MAX_WAIT_S = 300.0


class OpenAIBackend(Backend):
    """Chat completions from an OpenAI-compatible endpoint."""

    name = "openai"

    def __init__(self, spec: ModelSpec, stats: dict[str, dict[str, float]] | None = None):
        super().__init__(spec)
        if not spec.base_url:
            raise UserError("the openai backend needs model.base_url, e.g. http://localhost:8000/v1")
        urls = [spec.base_url] if isinstance(spec.base_url, str) else spec.base_url
        self._endpoints = [_Endpoint(u.rstrip("/") + "/") for u in urls]
        self._stats = stats if stats is not None else {}
        self._headers()  # a missing header variable is a config error: report it now
        self._requests = RateLimiter(spec.requests_per_minute) if spec.requests_per_minute else None
        self._tokens = RateLimiter(spec.tokens_per_minute) if spec.tokens_per_minute else None
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.unreachable: dict[str, str] = {}  # url -> why: endpoints ``served`` found nothing answering at

    @classmethod
    def build(cls, spec: ModelSpec, usage: Any = None) -> OpenAIBackend:
        """Requests, errors and latency per endpoint counted into ``usage.endpoints``; the model the endpoints
        report serving recorded into ``usage``, which refuses a stage that mixes models."""
        backend = cls(spec, stats=usage.endpoints if usage is not None else None)
        if usage is not None:
            backend.record_served(usage)
        return backend

    def record_served(self, usage: Any) -> None:
        """Record the model the endpoints report serving; endpoints of one spec serving different models, or a
        model other than the stage's earlier runs had, are user errors (before any request)."""
        served = self.served()
        if len(set(served.values())) > 1:
            listed = "; ".join(f"{url}: {model}" for url, model in sorted(served.items()))
            raise UserError(f"model {self.spec.model!r}: the endpoints serve different models ({listed})")
        for reported in set(served.values()):
            usage.serving(self.spec.model, reported)
        for url, why in self.unreachable.items():
            usage.unreachable[f"{self.spec.model} at {clean_endpoint(url)}"] = why

    def _headers(self) -> dict[str, str]:
        headers = {}
        key = os.environ.get(self.spec.api_key_env) if self.spec.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for header, env in self.spec.headers_env.items():
            value = os.environ.get(env)
            if value is None:
                raise UserError(f"model.headers_env: environment variable {env} (for header {header}) is not set")
            headers[header] = value
        return headers

    def served(self) -> dict[str, str]:
        """What each endpoint reports serving for ``spec.model`` (``GET /v1/models``): the listed entry of that
        name, by its ``root`` (vLLM's weights) or id, or the one model an endpoint lists; endpoints that do not
        answer, or list several models but not this one, are left out (their requests will say more), those that
        cannot be reached at all kept in ``unreachable`` (url -> why: a stage answered from the cache says so)."""
        import httpx

        out = {}
        self.unreachable = {}
        for e in self._endpoints:
            try:
                response = httpx.get(e.url + "models", headers=self._headers(), timeout=min(self.spec.timeout_s, 10))
                listed = response.json().get("data") if response.status_code == 200 else None
            except httpx.TransportError as x:  # refused, timed out, no such host: nothing answers there
                self.unreachable[e.url.rstrip("/")] = str(x).splitlines()[0] if str(x) else type(x).__name__
                continue
            except (httpx.HTTPError, ValueError, AttributeError):
                continue
            if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
                continue
            named = [m for m in listed if m.get("id") == self.spec.model] or (listed if len(listed) == 1 else [])
            if named:
                out[e.url.rstrip("/")] = str(named[0].get("root") or named[0].get("id"))
        return out

    def _session(self) -> asyncio.Semaphore:
        """Open the endpoints' HTTP clients for the running event loop; the concurrency bound
        (``max_concurrency`` per endpoint)."""
        import httpx

        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            # httpx scans every connection of its pool on each request: several small pools keep that scan short
            shards = -(-self.spec.max_concurrency // CONNECTIONS_PER_CLIENT)
            size = -(-self.spec.max_concurrency // shards)
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
            for e in self._endpoints:
                e.clients = [
                    httpx.AsyncClient(
                        base_url=e.url,
                        headers=self._headers(),
                        timeout=httpx.Timeout(self.spec.timeout_s),
                        limits=limits,
                    )
                    for _ in range(shards)
                ]
                e.busy = [0] * shards
            self._semaphore = asyncio.Semaphore(self.spec.max_concurrency * len(self._endpoints))
            self._loop = loop
        return self._semaphore

    async def aclose(self) -> None:
        if self._semaphore is not None and self._loop is asyncio.get_running_loop():
            for e in self._endpoints:
                for client in e.clients:
                    await client.aclose()
        self._semaphore = None

    def _pick(self) -> _Endpoint:
        """The endpoint with the fewest requests outstanding among those not backed off (if all are,
        the one back soonest)."""
        now = time.monotonic()
        up = [e for e in self._endpoints if e.down_until <= now] or [min(self._endpoints, key=lambda e: e.down_until)]
        return min(up, key=lambda e: (e.outstanding, e.sent))

    def _record(self, e: _Endpoint, seconds: float, failed: bool) -> None:
        stats = self._stats.setdefault(e.url.rstrip("/"), {"requests": 0, "errors": 0, "seconds": 0.0})
        stats["requests"] += 1
        stats["seconds"] += seconds
        if failed:
            stats["errors"] += 1
            e.failures += 1
            e.down_until = time.monotonic() + min(self.spec.endpoint_backoff_s * 2 ** (e.failures - 1), _MAX_WAIT_S)
        else:
            e.failures = 0

    # ------------------------------------------------------------ generation
    async def _generate(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams
    ) -> list[Completion]:
        out: list[Completion] = []
        while len(out) < params.n:  # servers that ignore n get asked again for the rest
            want = params.n - len(out)
            seed = None if params.seed is None else params.seed + len(out)
            data = await self._post(self._body(messages, tools, params, want, seed))
            if isinstance(data, str):
                return out + failed(want, data)
            try:
                got = self._completions(data, tools)
            except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:  # Malformed included
                return out + failed(want, f"malformed response: {e}"[:500])
            if not got:
                return out + failed(want, "the response has no choices")
            out.extend(got[:want])
        return out

    def _body(
        self, messages: list[Message], tools: list[ToolSchema] | None, params: SamplingParams, n: int, seed: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.spec.model,
            "messages": to_openai(with_tool_media(messages) if self.spec.tool_media != "text" else messages),
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if tools:
            body["tools"] = tools
        if params.stop:
            body["stop"] = list(params.stop)
        if seed is not None:
            body["seed"] = seed
        if self.spec.logprobs:
            body["logprobs"] = True
        body.update(self.spec.extra_body)
        if self.spec.chat_template_kwargs:  # vLLM's and SGLang's request field (over extra_body's, key by key)
            body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}), **self.spec.chat_template_kwargs}
        return body

    async def _post(self, body: dict[str, Any]) -> dict[str, Any] | str:
        """The response JSON, or why the request failed after its retries."""
        import httpx

        semaphore = self._session()
        estimate = len(json.dumps(body["messages"])) / 4 + body["max_tokens"] * body["n"]
        problem = ""
        for attempt in range(self.spec.max_retries + 1):
            if self._requests:
                await self._requests.acquire(1)
            if self._tokens:
                await self._tokens.acquire(estimate)
            wait: float | None = None
            async with semaphore:
                endpoint = self._pick()
                endpoint.outstanding += 1
                endpoint.sent += 1
                shard = min(range(len(endpoint.busy)), key=endpoint.busy.__getitem__)
                endpoint.busy[shard] += 1
                t0 = time.monotonic()
                response = None
                try:
                    response = await endpoint.clients[shard].post("chat/completions", json=body)
                except httpx.TimeoutException:
                    problem = f"timed out after {self.spec.timeout_s:g}s"
                except httpx.TransportError as e:
                    problem = f"connection error ({type(e).__name__})"
                finally:
                    endpoint.outstanding -= 1
                    endpoint.busy[shard] -= 1
                retryable = response is None or response.status_code in _RETRY_STATUS or response.status_code >= 500
                self._record(endpoint, time.monotonic() - t0, retryable)
                if response is not None:
                    if response.status_code == 200:
                        try:
                            data = _unicode(response.json())
                        except (json.JSONDecodeError, UnicodeDecodeError):
                            return "malformed response: not JSON"
                        if not isinstance(data, dict):
                            return f"malformed response: a JSON {type(data).__name__}, not an object"
                        if self._tokens:
                            used = (data.get("usage") or {}).get("total_tokens")
                            if isinstance(used, (int, float)):
                                self._tokens.adjust(estimate - used)
                        return data
                    problem = f"HTTP {response.status_code}: {_error_message(response)}"
                    if response.status_code not in _RETRY_STATUS and response.status_code < 500:
                        return problem
                    wait = _retry_after(response.headers.get("retry-after"))
            if attempt == self.spec.max_retries:
                break
            if wait is None and any(e.down_until <= time.monotonic() for e in self._endpoints):
                wait = 0.0  # another endpoint is up: retry there now
            if wait is None:
                wait = self.spec.retry_backoff_s * 2**attempt * (1 + 0.25 * random.random())
            await asyncio.sleep(min(wait, _MAX_WAIT_S))
        return f"{problem} (gave up after {self.spec.max_retries + 1} attempts)"

    def _completions(self, data: dict[str, Any], tools: list[ToolSchema] | None) -> list[Completion]:
        """The response's choices as completions; raises (``Malformed``, or a type error) on a response
        that is not the API's shape."""
        choices = data.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise Malformed("'choices' is not a list of objects")
        choices = sorted(choices, key=lambda c: int(c.get("index") or 0))
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise Malformed("'usage' is not an object")
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        total_completion = int(usage.get("completion_tokens") or 0)
        prompt_ids = token_ids_of(data.get("prompt_token_ids"), "prompt_token_ids")
        out = []
        for i, choice in enumerate(choices):
            msg = choice.get("message") or {}
            if not isinstance(msg, dict):
                raise Malformed(f"choice {i}: 'message' is not an object")
            content = msg.get("content") or ""
            if not isinstance(content, str):
                raise Malformed(f"choice {i}: 'content' is not text")
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            if not isinstance(reasoning, (str, type(None))) or not isinstance(msg.get("tool_calls") or [], list):
                raise Malformed(f"choice {i}: 'reasoning_content' is not text or 'tool_calls' is not a list")
            if reasoning is None:
                reasoning, content = split_reasoning(content)
            calls, errors = parse_openai_tool_calls(msg.get("tool_calls"), tools)
            content, text_calls, text_errors = parse_tool_calls(content, tools)
            calls, errors = calls + text_calls, errors + text_errors
            logprobs = sampled_logprobs(choice.get("logprobs"), i)
            token_ids = token_ids_of(choice.get("token_ids"), f"choice {i}: token_ids")
            count = len(token_ids) if token_ids else len(logprobs) if logprobs else None
            if count is None:  # only a total for all choices: share it out
                count = total_completion // len(choices) + (i < total_completion % len(choices))
            finish = choice.get("finish_reason") or "stop"
            if finish == "function_call" or (calls and finish == "stop"):
                finish = "tool_calls"
            out.append(
                Completion(
                    text=content,
                    tool_calls=calls,
                    tool_call_errors=errors,
                    reasoning=reasoning,
                    finish_reason=finish,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=count,
                    prompt_token_ids=list(prompt_ids) if prompt_ids else None,
                    token_ids=list(token_ids) if token_ids else None,
                    logprobs=logprobs,
                )
            )
        return out


@dataclass(eq=False)
class _Endpoint:
    """One server of the list: its clients (per event loop; requests in flight on each) and its load and
    failure state."""

    url: str
    clients: list[Any] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    outstanding: int = 0
    sent: int = 0
    failures: int = 0
    down_until: float = 0.0


class Malformed(ValueError):
    """A response that is not the shape the chat completions API promises."""


def sampled_logprobs(block: Any, choice: int) -> list[float] | None:
    """A choice's ``logprobs`` block as the logprobs of the sampled tokens, None when the server sent none; a
    token entry without a numeric logprob is malformed (never read as a default)."""
    if block is None:
        return None
    if not isinstance(block, dict) or not isinstance(block.get("content") or [], list):
        raise Malformed(f"choice {choice}: 'logprobs' is not an object with a 'content' list")
    if block.get("content") is None:
        return None
    out = []
    for k, t in enumerate(block["content"]):
        value = t.get("logprob") if isinstance(t, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Malformed(f"choice {choice}: token {k} has logprob {value!r}")
        out.append(float(value))
    return out


def token_ids_of(value: Any, what: str) -> list[int] | None:
    """vLLM's ``token_ids`` / ``prompt_token_ids``: a list of integers, or None; anything else is malformed."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise Malformed(f"{what} is not a list of integers")
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _unicode(value: Any) -> Any:
    """A response with every lone surrogate (JSON may escape one, ``"\\ud800"``; UTF-8 cannot hold it)
    replaced by U+FFFD: a model's odd text is data, not a crash where it is cached or stored."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_unicode(k): _unicode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unicode(v) for v in value]
    return value


def _error_message(response: Any) -> str:
    try:
        err = response.json().get("error")
        message = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        message = None
    return _unicode(str(message or response.text or response.reason_phrase)[:300])


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
