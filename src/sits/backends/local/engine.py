"""One llama.cpp model behind an async, one-generation-at-a-time interface.

llama.cpp calls block, so every call runs on the engine's single thread; the
event loop only moves finished tokens. The single thread is also the lock that
keeps two generations off one llama context, and an asyncio.Lock in front of it
makes waiting requests queue in arrival order without occupying that thread.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sits.backends.local.model_files import PromptFormat
from sits.backends.local.plain_prompt import TRANSCRIPT_STOPS, render_transcript
from sits.backends.local.protocol import ChatMessage, GenerationJob
from sits.errors import ContextTooLong, SitsError

if TYPE_CHECKING:
    from llama_cpp import Llama


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class GenerationEnd:
    """Last event of a generation. Token counts of a streamed generation may be
    off by one when it stopped on a stop sequence (llama.cpp does not report them)."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


GenerationEvent = TextDelta | GenerationEnd


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_DONE = object()
# Prompts are evaluated in chunks cut at multiples of this (`LlamaEngine._prefill`).
PREFILL_CHUNK = 64


class LlamaEngine:
    """Owns one GGUF model; `generate` streams one job's events, one job at a time."""

    def __init__(
        self, model_path: Path, *, prompt_format: PromptFormat, n_ctx: int, n_threads: int
    ) -> None:
        self._model_path = model_path
        self._prompt_format = prompt_format
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._turn = asyncio.Lock()
        self._llama: Llama | None = None
        self._chat_formatter: Any = None
        self._reusable = 0  # cached positions evaluated as whole prompt chunks (`_prefill`)
        self.running = 0  # generations on the model now (0 or 1)
        self.waiting = 0  # generations queued behind it

    @property
    def loaded(self) -> bool:
        return self._llama is not None

    async def load(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._load)

    async def close(self) -> None:
        """Wait for the running generation's thread to finish, then release the model."""
        async with self._turn:
            self._llama = None
        self._thread.shutdown(wait=False)

    async def generate(self, job: GenerationJob) -> AsyncIterator[GenerationEvent]:
        """Yield TextDelta events then one GenerationEnd.

        Closing the iterator early (use contextlib.aclosing) stops the model
        between tokens and returns only once the model is idle again.
        """
        self.waiting += 1
        try:
            await self._turn.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        try:
            loop = asyncio.get_running_loop()
            events: asyncio.Queue[object] = asyncio.Queue()
            stop = threading.Event()

            def put(item: object) -> None:
                loop.call_soon_threadsafe(events.put_nowait, item)

            def produce() -> None:
                try:
                    with closing(self._events(job)) as produced:
                        for event in produced:
                            if stop.is_set():
                                break
                            put(event)
                except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                    put(_Failed(exc))
                finally:
                    put(_DONE)

            running = loop.run_in_executor(self._thread, produce)
            try:
                while (item := await events.get()) is not _DONE:
                    if isinstance(item, _Failed):
                        raise _translated(item.error)
                    assert isinstance(item, (TextDelta, GenerationEnd))
                    yield item
            finally:
                stop.set()
                # the next job may only start once llama is idle again
                await asyncio.shield(running)
        finally:
            self.running -= 1
            self._turn.release()

    # -- on the llama thread -------------------------------------------------

    def _load(self) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        with _plain_weight_buffers():
            llama = Llama(
                model_path=str(self._model_path),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads,
                verbose=False,
            )
        template = llama.metadata.get("tokenizer.chat_template")
        if self._prompt_format == "chat-template":
            if not template:
                raise SitsError(
                    f"{self._model_path.name} has no chat template; use prompt format 'plain'",
                    code="no_chat_template",
                )
            # The formatter llama.cpp's create_chat_completion would apply; the engine formats and
            # tokenizes the prompt itself, once, to evaluate it in fixed chunks (`_prefill`).
            self._chat_formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=llama.detokenize([llama.token_eos()], special=True).decode(),
                bos_token=llama.detokenize([llama.token_bos()], special=True).decode(),
            )
        self._llama = llama

    def _events(self, job: GenerationJob) -> Iterator[GenerationEvent]:
        llama = self._llama
        if llama is None:
            raise SitsError("model is not loaded", code="model_not_loaded", http_status=503)
        params = job.params
        sampling: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "presence_penalty": params.presence_penalty,
            "frequency_penalty": params.frequency_penalty,
            # llama.cpp otherwise reuses one fixed seed for every request
            "seed": params.seed if params.seed is not None else random.randrange(2**31),
            "stream": True,
        }
        # The prompt is tokenized once and handed to llama.cpp as tokens: the same ones `_prefill` evaluated.
        if job.messages is not None and self._prompt_format == "chat-template":
            formatted = self._chat_formatter(messages=[_template_message(m) for m in job.messages])
            tokens = llama.tokenize(formatted.prompt.encode(), add_bos=not formatted.added_special, special=True)
            template_stops = [formatted.stop] if isinstance(formatted.stop, str) else formatted.stop or []
            stops, criteria, param = [*params.stop, *template_stops], formatted.stopping_criteria, "messages"
        else:
            if job.messages is not None:
                prompt = render_transcript(job.messages)
                stops = [*params.stop, *TRANSCRIPT_STOPS]
            else:
                prompt = job.prompt or ""
                stops = list(params.stop)
            tokens = llama.tokenize(prompt.encode(), add_bos=True, special=True)
            criteria, param = None, "prompt" if job.prompt is not None else "messages"
        prompt_tokens = len(tokens)
        self._check_context(prompt_tokens, param=param)
        self._prefill(llama, tokens)
        chunks = llama.create_completion(prompt=tokens, stop=stops, stopping_criteria=criteria, **sampling)
        finish_reason = "stop"
        # after "Assistant:" a base model starts with a space that is no part of the answer
        leading_space = job.messages is not None and self._prompt_format == "plain"
        with closing(chunks):
            for chunk in chunks:
                choice = chunk["choices"][0]
                piece = choice["text"]
                if piece and leading_space:
                    piece = piece.lstrip()
                    leading_space = not piece
                if piece:
                    yield TextDelta(piece)
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
        # llama.cpp evaluates every completion token but the last sampled one; an
        # end-of-generation token is sampled yet never part of the completion.
        evaluated = max(llama.n_tokens - prompt_tokens, 0)
        completion_tokens = evaluated if finish_reason == "stop" else evaluated + 1
        yield GenerationEnd(finish_reason, prompt_tokens, completion_tokens)

    def _prefill(self, llama: Llama, tokens: list[int]) -> None:
        """Evaluate the prompt in fixed, aligned chunks, reusing only whole chunks of an earlier prompt, so
        that an answer depends on its request alone and never on what the engine did before.

        On the CPU backend the logits of a token depend on how its batch was cut: a prompt evaluated as
        one batch, or as a cached prefix plus the rest, or ending in a one-token batch (what
        llama-cpp-python's own prefix reuse does when the whole prompt is cached) gives different first
        tokens; "Name a color." answered differently when it followed itself (SmolLM2's top two logits
        moved by 0.3; Gemma-3 moves for most cuts). llama.cpp's server documents the same for
        `cache_prompt`. Cutting every prompt at the same positions, [0, C), [C, 2C), ..., makes a fresh
        evaluation and a reusing one the same computation; the KV of generated tokens and of a prompt's
        last partial chunk is never reused, since a later prompt cuts those positions differently.
        generate() then finds the whole prompt evaluated and samples from its last logits."""
        chunk = PREFILL_CHUNK
        held = min(llama.n_tokens, self._reusable)
        common = 0
        for cached, wanted in zip(llama.input_ids[:held].tolist(), tokens):
            if cached != wanted:
                break
            common += 1
        start = (common // chunk) * chunk
        if start == len(tokens):  # the whole prompt is cached in whole chunks: its last one is redone
            start -= chunk
        llama.n_tokens = start  # eval() drops the KV cache from here on
        for begin in range(start, len(tokens), chunk):
            llama.eval(tokens[begin:begin + chunk])
        self._reusable = (len(tokens) // chunk) * chunk

    def _check_context(self, prompt_tokens: int, *, param: str) -> None:
        if prompt_tokens >= self._n_ctx:
            raise ContextTooLong(
                f"the prompt is {prompt_tokens} tokens; this model's context window "
                f"is {self._n_ctx} tokens",
                param=param,
            )


def _template_message(message: ChatMessage) -> dict[str, str]:
    # chat templates know "system", not OpenAI's newer "developer"
    role = "system" if message.role == "developer" else message.role
    return {"role": role, "content": message.content}


def _translated(error: BaseException) -> BaseException:
    if isinstance(error, SitsError):
        return error
    if isinstance(error, ValueError) and "context window" in str(error):
        return ContextTooLong(str(error))
    return SitsError(f"generation failed: {type(error).__name__}: {error}")


@contextmanager
def _plain_weight_buffers() -> Iterator[None]:
    """Load weights into plain CPU buffers, not llama.cpp's "extra" buffer types (AMX / repacked
    layouts): on AMX hosts the AMX matmul of llama-cpp-python 0.3.36 segfaults on the first decode
    (ggml_backend_amx_mul_mat). `Llama()` takes no such option, so the defaults it reads are
    adjusted while it loads; this runs in the model's own worker process."""
    import llama_cpp.llama_cpp as low_level

    defaults = low_level.llama_model_default_params

    def plain() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = plain
    try:
        yield
    finally:
        low_level.llama_model_default_params = defaults
