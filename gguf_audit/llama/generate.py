"""Regenerate the name tables from a pinned llama.cpp source tree (run only to re-pin).

``python -m gguf_audit.llama.generate SRC --build b11312 --commit 0c1e57098`` reads
the C++ sources of llama.cpp at ``SRC`` (the tree the oracle was built from) and
writes ``gguf_audit/llama/<build>.json``; point :data:`gguf_audit.llama.tables.BUILD`
at it. What it reads, and from where:

- ``src/llama-arch.cpp``: ``LLM_ARCH_NAMES`` (architectures), ``LLM_KV_NAMES``
  (metadata keys, ``%s`` written ``{arch}``), ``LLM_TENSOR_NAMES`` (tensor names,
  ``%d`` written ``{bid}`` then ``{xid}``);
- ``src/llama-model.cpp``: ``llama_model_mapping`` (each architecture's model
  class), ``LLAMA_ROPE_SCALING_TYPES``, the tensors every architecture may get
  (``llama_model_base::load_tensors``), and the scalar keys ``load_hparams`` reads
  into ``hparams`` with the type of the field they land in (``src/llama-hparams.h``);
- ``src/models/*.cpp``: the tensors each model class names (its base classes' too), and
  whether it reads the MTP (``nextn``) layers;
- ``src/llama-hparams.h``: ``LLAMA_MAX_LAYERS``, ``LLAMA_MAX_EXPERTS``;
- ``src/llama-vocab.cpp``: the tokenizer models ``llama_vocab::load`` accepts, the
  ones that need ``tokenizer.ggml.merges``, and the BPE pre-tokenizer names it
  accepts (a branch that throws is a name it refuses).

The parsing is by regular expressions over code llama.cpp keeps in table form; a
pattern that finds nothing stops the run (exit 1) rather than write an empty table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

__all__ = ["generate", "main"]

# Field types of llama_hparams (C++) to the GGUF value type GGUFMeta::GKV insists on.
_CPP_TO_GGUF: Final = {
    "uint32_t": "uint32",
    "int32_t": "int32",
    "uint64_t": "uint64",
    "float": "float32",
    "bool": "bool",
    "std::string": "string",
}


_SCALAR_GGUF: Final = frozenset({"uint32", "int32", "float32", "bool", "string"})


class GenerateError(Exception):
    """The source did not have the shape the generator reads."""


def _block(text: str, start: str, what: str) -> str:
    """The text from ``start`` to the first ``};`` after it."""
    i = text.find(start)
    if i < 0:
        raise GenerateError(f"{what}: {start!r} not found")
    j = text.find("};", i)
    return text[i:j]


def _pairs(block: str, prefix: str, what: str) -> dict[str, str]:
    found = dict(re.findall(rf"\{{\s*({prefix}\w+)\s*,\s*\"([^\"]*)\"\s*\}}", block))
    if not found:
        raise GenerateError(f"{what}: no entries")
    return found


def _tensor_template(name: str) -> str:
    out = name.replace("%d", "{bid}", 1).replace("%d", "{xid}", 1)
    return out


def _model_classes(model_cpp: str) -> dict[str, str]:
    """LLM_ARCH_* to the llama_model_* class ``llama_model_mapping`` creates for it."""
    body = _block(model_cpp, "static llama_model * llama_model_mapping", "llama_model_mapping")
    out: dict[str, str] = {}
    pending: list[str] = []
    for token in re.finditer(r"case\s+(LLM_ARCH_\w+)\s*:|return\s+new\s+(\w+)\s*\(", body):
        if token.group(1):
            pending.append(token.group(1))
        else:
            for arch in pending:
                out[arch] = token.group(2)
            pending = []
    if not out:
        raise GenerateError("llama_model_mapping: no cases")
    return out


_NEXTN: Final = "NEXTN"
"""A pseudo tensor id marking a class whose file reads the MTP (nextn) layers."""


def _class_tensors(src: Path) -> dict[str, set[str]]:
    """Each llama_model_* class to the LLM_TENSOR_* ids its file (and its bases' files) name,
    with :data:`_NEXTN` when the file mentions the nextn layers (``NEXTN`` or ``n_layer_nextn``)."""
    headers = (src / "src" / "models" / "models.h").read_text()
    bases = dict(re.findall(r"struct\s+(llama_model_\w+)\s*:\s*public\s+(llama_model_\w+)", headers))
    own: dict[str, set[str]] = {}
    for cpp in sorted((src / "src" / "models").glob("*.cpp")):
        text = cpp.read_text()
        ids = set(re.findall(r"\bLLM_TENSOR_\w+", text))
        if "NEXTN" in text or "n_layer_nextn" in text:
            ids.add(_NEXTN)
        for cls in set(re.findall(r"\b(llama_model_\w+)::load_arch_tensors", text)):
            own.setdefault(cls, set()).update(ids)
    out: dict[str, set[str]] = {}
    for cls in set(own) | set(bases):
        union: set[str] = set()
        seen = cls
        while True:
            union |= own.get(seen, set())
            if seen not in bases:
                break
            seen = bases[seen]
        out[cls] = union
    return out


def _hparams_field_types(hparams_h: str) -> dict[str, str]:
    """llama_hparams member name to its scalar or per-layer array element C++ type."""
    out: dict[str, str] = {}
    for ctype, name in re.findall(r"^\s*(uint32_t|int32_t|uint64_t|float|bool)\s+(\w+)\s*[=;]", hparams_h, re.M):
        out[name] = ctype
    for ctype, name in re.findall(r"std::array<\s*(uint32_t|int32_t|float)\s*,\s*\w+\s*>\s+(\w+)\s*;", hparams_h):
        out[name] = ctype
    return out


def _base_key_types(model_cpp: str, hparams_h: str, kv: dict[str, str]) -> dict[str, str]:
    """Keys ``llama_model_base::load_hparams`` reads for every architecture, and the GGUF type of each.

    Only reads into a typed ``hparams`` field or a local declared in the function
    are taken; a key read into two types is left out (it is not one type).
    """
    i = model_cpp.find("void llama_model_base::load_hparams(")
    j = model_cpp.find("load_arch_hparams(ml);", i)
    if i < 0 or j < 0:
        raise GenerateError("llama_model_base::load_hparams not found")
    body = model_cpp[i:j]
    fields = _hparams_field_types(hparams_h)
    locals_ = dict(
        (name, ctype)
        for ctype, name in re.findall(r"^\s*(uint32_t|int32_t|float|bool|std::string)\s+(\w+)", body, re.M)
    )
    seen: dict[str, set[str]] = {}
    for fn, key, target in re.findall(r"ml\.(get_key|get_key_or_arr)\(\s*(LLM_KV_\w+)\s*,\s*([\w.]+)", body):
        ctype = fields.get(target.removeprefix("hparams.")) if target.startswith("hparams.") else locals_.get(target)
        if ctype is None or key not in kv:
            continue
        gtype = _CPP_TO_GGUF[ctype]
        seen.setdefault(kv[key], set()).add(gtype if fn == "get_key" else f"{gtype}|array")
    return {key: types.pop() for key, types in sorted(seen.items()) if len(types) == 1}


def _depth_one(body: str) -> str:
    """``body`` (from its opening brace) with every nested block cut out: the statements always run."""
    out: list[str] = []
    depth = 0
    for ch in body:
        if ch == "{":
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            if depth == 0:
                break
            continue
        if depth == 1:
            out.append(ch)
    return "".join(out)


def _split_args(args: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in args:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def _statement_calls(flat: str) -> list[tuple[str, str]]:
    """``ml.get_key(...);`` and its kin that are whole statements (not part of ``a || b`` or a condition)."""
    calls: list[tuple[str, str]] = []
    for m in re.finditer(r"ml\.(get_key_or_arr|get_key|get_arr)\(", flat):
        before = flat[: m.start()].rstrip()
        # After a block _depth_one cut out, a statement follows its header's ')'.
        if before and before[-1] not in ";)":
            continue
        depth, i = 1, m.end()
        while i < len(flat) and depth:
            depth += {"(": 1, ")": -1}.get(flat[i], 0)
            i += 1
        if flat[i:].lstrip().startswith(";"):
            calls.append((m.group(1), flat[m.end() : i - 1]))
    return calls


def _required_reads(body: str, fields: dict[str, str], kv: dict[str, str], *, optional: bool = False) -> dict[str, str]:
    """The keys a function body always reads with ``required`` (the default), each with its GGUF type
    (``uint32``; ``uint32|array`` for ``get_key_or_arr``; ``array`` for ``get_arr``; ``?`` unknown);
    with ``optional``, the reads it always makes with ``required = false`` instead."""
    # Comments out first: `/*required=*/false` is an optional read, and a brace in a comment is no block.
    flat = _depth_one(re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S))
    locals_ = {n: t for t, n in re.findall(r"\b(uint32_t|int32_t|float|bool|std::string)\s+(\w+)", flat)}
    out: dict[str, str] = {}
    for fn, args in _statement_calls(flat):
        parts = _split_args(args)
        n_required_at = {"get_key": 2, "get_arr": 2, "get_key_or_arr": 3}[fn]
        is_optional = len(parts) > n_required_at and parts[n_required_at] == "false"
        if not parts or parts[0] not in kv or is_optional is not optional:
            continue
        target = parts[1] if len(parts) > 1 else ""
        ctype = fields.get(target.removeprefix("hparams.")) if target.startswith("hparams.") else locals_.get(target)
        gtype = _CPP_TO_GGUF.get(ctype or "", "?")
        if fn == "get_arr":
            gtype = "array"
        elif fn == "get_key_or_arr" and gtype != "?":
            gtype += "|array"
        out[kv[parts[0]].replace("%s", "{arch}")] = gtype
    if not optional:
        out.update(_throwing_reads(body, kv))
    return out


_READ_OR_THROW: Final = re.compile(
    r"if\s*\(\s*!\s*ml\.(get_arr|get_key|get_key_or_arr)\(([^;{}]*?)\)\s*\)\s*\{?\s*throw\b"
)


def _throwing_reads(body: str, kv: dict[str, str]) -> dict[str, str]:
    """The optional reads a function body makes required by throwing when they find nothing, always run
    (``if (!ml.get_arr(LLM_KV_TARGET_LAYERS, ids, false)) { throw ... }``: dflash's target layers)."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S)
    end = _block_end(text)
    out: dict[str, str] = {}
    for m in _READ_OR_THROW.finditer(text, 0, end):
        depth = text.count("{", 0, m.start()) - text.count("}", 0, m.start())
        parts = _split_args(m.group(2))
        if depth == 1 and parts and parts[0] in kv:
            out[kv[parts[0]].replace("%s", "{arch}")] = "array" if m.group(1) == "get_arr" else "?"
    return out


def _block_end(text: str) -> int:
    """Where the block opening ``text`` ends."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0 and ch == "}":
            return i
    return len(text)


def _arch_required_keys(
    src: Path, hparams_h: str, kv: dict[str, str], *, optional: bool = False
) -> dict[str, dict[str, str]]:
    """Each llama_model_* class to the keys its ``load_arch_hparams`` (or its base's) always requires (with
    ``optional``: always reads, not requiring them)."""
    fields = _hparams_field_types(hparams_h)
    headers = (src / "src" / "models" / "models.h").read_text()
    bases = dict(re.findall(r"struct\s+(llama_model_\w+)\s*:\s*public\s+(llama_model_\w+)", headers))
    own: dict[str, dict[str, str]] = {}
    for cpp in sorted((src / "src" / "models").glob("*.cpp")):
        text = cpp.read_text()
        for m in re.finditer(r"void\s+(llama_model_\w+)::load_arch_hparams\([^)]*\)\s*\{", text):
            own[m.group(1)] = _required_reads(text[m.end() - 1 :], fields, kv, optional=optional)
    out: dict[str, dict[str, str]] = {}
    for cls in set(own) | set(bases):
        seen = cls
        while seen not in own and seen in bases:
            seen = bases[seen]
        out[cls] = own.get(seen, {})
    return out


def _vocab(vocab_cpp: str) -> tuple[list[str], list[str], list[str]]:
    """Tokenizer models, the ones needing merges, and accepted BPE pre-tokenizer names."""
    i = vocab_cpp.find("// determine vocab type")
    j = vocab_cpp.find("unknown tokenizer:", i)
    if i < 0 or j < 0:
        raise GenerateError("llama_vocab::load: the tokenizer model chain not found")
    chain = vocab_cpp[i:j]
    models = re.findall(r'tokenizer_model\s*==\s*"([^"]+)"', chain)
    # Split the chain into its branches: each `if (...) {` condition and the body up to the next branch.
    branches = re.split(r"\}\s*else\s+if\s*\(|\bif\s*\(\s*tokenizer_model", chain)
    merges: list[str] = []
    for branch in branches:
        names = re.findall(r'tokenizer_model\s*==\s*"([^"]+)"', branch) or re.findall(r'^\s*==\s*"([^"]+)"', branch)
        if "cannot find tokenizer merges" in branch:
            merges.extend(names)
    k = vocab_cpp.find("if (type == LLAMA_VOCAB_TYPE_BPE)", j)
    m = vocab_cpp.find("} else if (type == LLAMA_VOCAB_TYPE_SPM)", k)
    if k < 0 or m < 0:
        raise GenerateError("llama_vocab::load: the pre-tokenizer chain not found")
    pre: list[str] = []
    for branch in re.split(r"\}\s*else\b", vocab_cpp[k:m]):
        if "throw" in branch:
            continue
        pre.extend(re.findall(r'tokenizer_pre\s*==\s*"([^"]+)"', branch))
    if not models or not pre:
        raise GenerateError("llama_vocab::load: no tokenizer models or pre-tokenizers")
    return sorted(set(models)), sorted(set(merges)), sorted(set(pre))


_TN_SUFFIX = re.compile(r'\btn\(\s*LLM_TENSOR_\w+\s*,\s*"([a-z_0-9]+)"')
_TN_BARE = re.compile(r"\btn\(\s*(LLM_TENSOR_\w+)\s*(?:,\s*[a-z_]\w*\s*)*\)")
_COMMENT = re.compile(r"//[^\n]*")


def generate(src: Path, *, build: str, commit: str) -> dict[str, Any]:
    """The tables of the llama.cpp source tree at ``src``, stamped with ``build`` and ``commit``."""
    arch_cpp = (src / "src" / "llama-arch.cpp").read_text()
    model_cpp = (src / "src" / "llama-model.cpp").read_text()
    hparams_h = (src / "src" / "llama-hparams.h").read_text()
    vocab_cpp = (src / "src" / "llama-vocab.cpp").read_text()

    arch_ids = _pairs(_block(arch_cpp, "LLM_ARCH_NAMES = {", "LLM_ARCH_NAMES"), "LLM_ARCH_", "LLM_ARCH_NAMES")
    arch_ids.pop("LLM_ARCH_UNKNOWN", None)
    kv = _pairs(_block(arch_cpp, "LLM_KV_NAMES = {", "LLM_KV_NAMES"), "LLM_KV_", "LLM_KV_NAMES")
    tensor_ids = _pairs(_block(arch_cpp, "LLM_TENSOR_NAMES = {", "LLM_TENSOR_NAMES"), "LLM_TENSOR_", "LLM_TENSOR_NAMES")

    classes = _model_classes(model_cpp)
    class_tensors = _class_tensors(src)
    class_keys = _arch_required_keys(src, hparams_h, kv)
    class_optional = _arch_required_keys(src, hparams_h, kv, optional=True)
    arch_keys: dict[str, dict[str, str]] = {}
    arch_optional: dict[str, dict[str, str]] = {}
    common = set(re.findall(r"\bLLM_TENSOR_\w+", model_cpp))
    arch_tensors: dict[str, list[str]] = {}
    mtp: list[str] = []
    for arch_id, name in sorted(arch_ids.items(), key=lambda p: p[1]):
        cls = classes.get(arch_id)
        if cls is None:
            continue
        arch_keys[name] = class_keys.get(cls, {})
        scalar = {k: t for k, t in class_optional.get(cls, {}).items() if t in _SCALAR_GGUF}
        if scalar:
            arch_optional[name] = scalar
        if _NEXTN in class_tensors.get(cls, set()):
            mtp.append(name)
        ids = (class_tensors.get(cls, set()) | common) & tensor_ids.keys()
        arch_tensors[name] = sorted({_tensor_template(tensor_ids[t]) for t in ids})

    rope = _pairs(_block(model_cpp, "LLAMA_ROPE_SCALING_TYPES = {", "LLAMA_ROPE_SCALING_TYPES"), "LLAMA_", "rope")
    limits = dict(re.findall(r"#define\s+(LLAMA_MAX_LAYERS|LLAMA_MAX_EXPERTS)\s+(\d+)", hparams_h))
    if set(limits) != {"LLAMA_MAX_LAYERS", "LLAMA_MAX_EXPERTS"}:
        raise GenerateError("llama-hparams.h: LLAMA_MAX_LAYERS or LLAMA_MAX_EXPERTS not found")
    models, merges, pre = _vocab(vocab_cpp)
    # The suffixes the loaders give tensor names: tn(LLM_TENSOR_X, "weight", ...) and kin, in every source file.
    sources = [_COMMENT.sub("", p.read_text(errors="replace")) for p in sorted((src / "src").rglob("*.cpp"))]
    suffixes = sorted({m for text in sources for m in _TN_SUFFIX.findall(text)})
    if "weight" not in suffixes:
        raise GenerateError('src/: no tn(LLM_TENSOR_..., "weight") call found')
    # The few tensors created under their base name alone: tn(LLM_TENSOR_SSM_A, i), tn(LLM_TENSOR_D2T).
    bare = sorted(
        {_tensor_template(tensor_ids[t]) for text in sources for t in _TN_BARE.findall(text) if t in tensor_ids}
    )
    return {
        "build": build,
        "commit": commit,
        "source": "ggml-org/llama.cpp, read by python -m gguf_audit.llama.generate",
        "max_layers": int(limits["LLAMA_MAX_LAYERS"]),
        "max_experts": int(limits["LLAMA_MAX_EXPERTS"]),
        "architectures": sorted(arch_ids.values()),
        "keys": sorted({v.replace("%s", "{arch}") for v in kv.values()}),
        "hparams_key_types": {
            k.replace("%s", "{arch}"): v for k, v in _base_key_types(model_cpp, hparams_h, kv).items()
        },
        "tensor_names": sorted({_tensor_template(v) for v in tensor_ids.values()}),
        "arch_tensors": arch_tensors,
        "mtp_architectures": sorted(mtp),
        "arch_required_keys": arch_keys,
        "arch_optional_key_types": arch_optional,
        "rope_scaling_types": sorted(rope.values()),
        "tensor_suffixes": suffixes,
        "bare_tensor_names": bare,
        "tokenizer_models": models,
        "tokenizer_models_needing_merges": merges,
        "bpe_pre_tokenizers": pre,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gguf_audit.llama.generate", description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="the llama.cpp source tree (the one the oracle was built from)")
    parser.add_argument("--build", required=True, help="its build number, e.g. b11312")
    parser.add_argument("--commit", required=True, help="its commit, e.g. 0c1e57098")
    parser.add_argument("--out", type=Path, help="where to write (default: gguf_audit/llama/<build>.json)")
    args = parser.parse_args(argv)
    try:
        tables = generate(args.src, build=args.build, commit=args.commit)
    except (GenerateError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    out = args.out or Path(__file__).with_name(f"{args.build}.json")
    out.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n")
    print(
        f"{out}: {len(tables['architectures'])} architectures, {len(tables['keys'])} keys, "
        f"{len(tables['tensor_names'])} tensor names, {len(tables['tokenizer_models'])} tokenizer models, "
        f"{len(tables['bpe_pre_tokenizers'])} pre-tokenizers"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
