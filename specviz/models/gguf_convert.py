"""The first start's slow step, GGUF → safetensors, made faster in two ways.

1. **One parse per file.** transformers reads a GGUF's metadata three times per model
   (tokenizer, config, weights). For Qwen2.5's 151,643-token vocabulary and its merges one
   read is ~15 s of pure Python on a 2-core CPU. :func:`one_parse` makes the three share
   one ``gguf.GGUFReader`` (a read-only memory map, so sharing it is safe).
2. **Draft and target at once.** Dequantisation is single-threaded numpy, so two processes
   on two cores convert both models in about the time of the larger one
   (:func:`in_subprocess`), when the machine has the memory for it (:func:`parallel_ok`).

On the default pair (2-core EPYC, bf16) the first start went from 130–143 s to the
numbers in docs/design.md ("First start"); ``python bench/load_time.py --cold`` measures it.

The child process is this module: ``python -m specviz.models.gguf_convert GGUF OUT LABEL DTYPE``
prints one JSON object per line (``{"progress": …}`` then ``{"done": true}``, or
``{"error": …}`` and exit status 2).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil

from specviz.models.default_parts import Progress
from specviz.record.errors import ModelError

CACHE_FORMAT = 1  # the format of a converted cache folder, in its specviz.json

# Converting the default pair at once peaks near 9 GB (both models dequantised in fp32);
# below this much free memory the two conversions run one after the other instead.
PARALLEL_MIN_FREE = 12 * 2**30


@contextlib.contextmanager
def one_parse() -> Iterator[None]:
    """Within the block, every ``gguf.GGUFReader(path)`` of the same file returns one reader.

    transformers imports ``GGUFReader`` from ``gguf`` inside each loading function, so
    replacing the module attribute for the duration is enough; it is restored afterwards."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[str, object] = {}
    lock = threading.Lock()

    def shared(path, *args, **kwargs):
        key = os.path.realpath(os.fspath(path))
        with lock:
            if key not in readers:
                readers[key] = original(path, *args, **kwargs)
            return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


def parallel_ok(free_bytes: int | None = None, cpus: int | None = None) -> bool:
    """Convert the draft and the target at the same time: two or more cores and enough memory."""
    free = psutil.virtual_memory().available if free_bytes is None else free_bytes
    return (cpus or os.cpu_count() or 1) >= 2 and free >= PARALLEL_MIN_FREE


def in_subprocess(gguf: Path, out: Path, label: str, progress: Progress, dtype: str = "float32") -> None:
    """Convert in a child Python process (same signature as ``convert_gguf``),
    relaying its progress; a failure raises ModelError with the child's own message."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)}
    with tempfile.TemporaryFile(mode="w+") as stderr:
        with subprocess.Popen(
            [sys.executable, "-m", "specviz.models.gguf_convert", str(gguf), str(out), label, dtype],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        ) as child:
            said = None
            for line in child.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # a library printing to stdout: not ours
                if "progress" in msg:
                    progress(msg["progress"], None)
                elif "error" in msg:
                    said = msg["error"]
            code = child.wait()
        if code == 0 and said is None:
            return
        if said is None:
            stderr.seek(0)
            tail = stderr.read().strip().splitlines()[-1:] or [f"exit status {code}"]
            said = f"converting {gguf.name} failed: {tail[0]}"
        raise ModelError(said)


@contextlib.contextmanager
def atomic_folder(out: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``out`` in one rename,
    on any failure (Ctrl-C included) it is deleted. No half-written cache, ever."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", suffix=".partial", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def convert_gguf(gguf: Path, out: Path, label: str, progress: Progress, dtype: str = "float32") -> None:
    """Dequantise a GGUF once (in fp32, exact), cast it to ``dtype`` and save it as a
    safetensors folder.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, but
    ``safetensors.torch.save_model`` plus config.json (without its
    quantization_config) plus the tokenizer files makes a folder that loads fast.
    """
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with atomic_folder(out) as tmp, one_parse():
        progress(f"Converting {label} GGUF (first run only): tokenizer", None)
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            progress(f"Converting {label} GGUF (first run only): dequantising weights", None)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
        except Exception as exc:  # gguf and transformers raise assorted types on bad files
            raise ModelError(f"could not read the GGUF file {gguf}: {exc}") from None
        if dtype != "float32":
            model = model.to(getattr(torch, dtype))
        progress(f"Converting {label} GGUF (first run only): saving safetensors ({dtype})", None)
        save_model(model, str(tmp / "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        model.generation_config.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "specviz.json").write_text(json.dumps({"format": CACHE_FORMAT, "source": str(gguf)}))


def _child(argv: list[str]) -> int:
    import torch

    gguf, out, label, dtype = argv
    # Two of these run at once on a machine's cores: take half of them each.
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    def say(message: str, fraction: float | None) -> None:
        print(json.dumps({"progress": message}), flush=True)

    try:
        convert_gguf(Path(gguf), Path(out), label, say, dtype)
    except ModelError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
