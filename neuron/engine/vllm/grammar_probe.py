"""A request's schema or grammar compiled once in a child process, within a
time bound, before vLLM sees it (issue 31 point 3).

vLLM 0.32 compiles a structured output's grammar in its engine core, on a
small thread pool, and never stops a compile it started: an aborted
request's compile runs to its end (docs/security.md, "grammar compiles"),
and its time does not follow the schema's size (984 bytes took xgrammar
127 s). A thread cannot be stopped either; a process can. So the neuron
compiles the same grammar first with xgrammar in a child of its own: past
`timeout_s`, or when the request is cancelled meanwhile, the child is
killed (another starts in the background) and vLLM never sees the grammar;
within it, vLLM compiles it again (its cache is its own), for about as
long. The child keeps xgrammar's cache, so a schema seen before costs
nothing here.

What the probe cannot judge (a compile that fails, a grammar kind it does
not compile, a child that breaks) is left to vLLM: only a compile past the
bound is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

log = logging.getLogger("neuraxis.neuron")

# What the child compiles: (kind, spec), vLLM's structured output key
# (vllm/v1/structured_output/request.py get_structured_output_key).
Compile = Callable[[str, str], None]
# Builds the child's compile function from `setup` (a picklable value).
CompilerFactory = Callable[[Any], Compile]

# The kinds vLLM compiles with xgrammar that a client's request can carry.
JSON, GRAMMAR, REGEX = "json", "grammar", "regex"


def probe_key(structured_outputs: Any) -> tuple[str, str] | None:
    """What the probe compiles for vLLM's StructuredOutputsParams: the key
    vLLM's engine core compiles, of a kind a client's request carries
    (None: nothing to probe; a json_object format is always cheap)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Option
    from vllm.v1.structured_output.request import get_structured_output_key

    if structured_outputs is None or structured_outputs.all_constraints_none():
        return None
    option, spec = get_structured_output_key(structured_outputs)
    kind = {Option.JSON: JSON, Option.GRAMMAR: GRAMMAR, Option.REGEX: REGEX}.get(option)
    return (kind, spec) if kind is not None else None


class CompileTimeoutError(Exception):
    """The grammar did not compile within the bound; the child was killed."""


def xgrammar_compiler(tokenizer_info_json: str) -> Compile:
    """The child's compile function: xgrammar's, over the model's vocabulary,
    as vLLM's XgrammarBackend.compile_grammar calls it."""
    import xgrammar as xgr

    info = xgr.TokenizerInfo.deserialize_json(tokenizer_info_json)
    compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True)

    def compile_(kind: str, spec: str) -> None:
        if kind == JSON:
            compiler.compile_json_schema(spec, any_whitespace=True)
        elif kind == REGEX:
            compiler.compile_regex(spec)
        elif kind == GRAMMAR:
            from vllm.v1.structured_output.utils import grammar_is_likely_lark

            if grammar_is_likely_lark(spec):
                compiler.compile_lark(spec)
            else:
                compiler.compile_grammar(spec)

    return compile_


def _serve(conn: Connection, factory: CompilerFactory) -> None:
    """The child: its setup first, ready once set up, then one compile per
    message; the answer is None or why it failed (vLLM will say it to the
    client)."""
    from axon.process import die_with_parent

    die_with_parent()
    compile_ = factory(conn.recv())
    conn.send("ready")
    while True:
        try:
            kind, spec = conn.recv()
        except EOFError:
            return
        try:
            compile_(kind, spec)
            conn.send(None)
        except Exception as e:
            conn.send(f"{type(e).__name__}: {e}")


class GrammarProbe:
    """One child process compiling one grammar at a time."""

    def __init__(
        self, timeout_s: float, setup: Any, factory: CompilerFactory = xgrammar_compiler
    ) -> None:
        self.timeout_s = timeout_s
        self._setup, self._factory = setup, factory
        self._lock = asyncio.Lock()
        self._child: tuple[BaseProcess, Connection] | None = None
        self._broken = False  # the child could not be set up: no more tries
        self._warming: set[asyncio.Task[None]] = set()

    @property
    def child(self) -> BaseProcess | None:
        return self._child[0] if self._child is not None else None

    def warm(self) -> None:
        """Start a child in the background (with the engine, and after one is
        killed), so that no request waits for its start-up: seconds of
        importing xgrammar and reading the vocabulary."""

        async def start() -> None:
            async with self._lock:
                await self._ready()

        task = asyncio.create_task(start())
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def check(self, kind: str, spec: str) -> None:
        """Return once the grammar has compiled, or could not be judged;
        raise CompileTimeoutError past the bound. Cancelled meanwhile, the
        child is killed with its compile."""
        async with self._lock:
            conn = await self._ready()
            if conn is None:
                return
            try:
                conn.send((kind, spec))
                failed = await asyncio.wait_for(_receive(conn), self.timeout_s)
            except TimeoutError:
                self._replace()
                bound = f"{self.timeout_s:g} s"
                raise CompileTimeoutError(f"the grammar took more than {bound}") from None
            except (EOFError, OSError) as e:
                self._replace()
                log.warning("grammar probe: its process died (%s); vLLM will judge the grammar", e)
                return
            except BaseException:  # cancelled: the compile goes with the child
                self._replace()
                raise
        if failed is not None:
            log.info("grammar probe: the compile failed (%s); vLLM will judge it", failed)

    def close(self) -> None:
        """Kill the child and start no other (the engine's shutdown)."""
        self._broken = True
        for task in self._warming:
            task.cancel()
        self._kill()

    def _replace(self) -> None:
        self._kill()
        self.warm()

    async def _ready(self) -> Connection | None:
        """(Under the lock.) The child's end; None once a child cannot be set
        up: compiles then go unbounded, as before the probe, and it says so."""
        if self._broken:
            return None
        try:
            return await self._started()
        except (EOFError, OSError, RuntimeError) as e:
            self._broken = True
            log.error("grammar probe: its process does not start (%s); compiles unbounded", e)
            return None

    async def _started(self) -> Connection:
        """The child's end, started and set up (its start-up is not timed)."""
        if self._child is not None and self._child[0].is_alive():
            return self._child[1]
        self._kill()
        ours, theirs = multiprocessing.get_context("spawn").Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(theirs, self._factory), daemon=True
        )
        # Started from the event loop's thread: the child's parent-death
        # signal follows that thread, which lives as long as the neuron.
        process.start()
        theirs.close()
        self._child = (process, ours)
        try:
            # The setup (the vocabulary: 1.6 MB for SmolLM2) from a thread: a
            # write that size waits for the child to read it, after its start
            # and its imports, and on the event loop it held the neuron's
            # health answers for as long.
            await asyncio.to_thread(ours.send, self._setup)
            if await _receive(ours) != "ready":
                raise RuntimeError("the grammar probe did not say it was ready")
        except BaseException:
            self._kill()
            raise
        return ours

    def _kill(self) -> None:
        if self._child is None:
            return
        process, conn = self._child
        self._child = None
        conn.close()
        if process.is_alive():
            process.kill()
        process.join(timeout=5)


async def _receive(conn: Connection) -> Any:
    """The child's next message, without blocking the event loop; EOFError
    if it died."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await readable
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(fd)
    return conn.recv()
