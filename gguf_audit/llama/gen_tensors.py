"""Generate the per-architecture tensor programs from a pinned llama.cpp source tree (run only to re-pin).

``python -m gguf_audit.llama.gen_tensors SRC --build b11312`` reads each model class's
``load_arch_tensors`` in ``SRC/src/models/*.cpp`` (a class without one runs its base
class's), and the helpers of ``llama_model_base`` it calls
(``create_tensor_qkv``, ``create_tensor_gate_up_exps`` in ``src/llama-model.cpp``),
translates them (:mod:`gguf_audit.llama.cxx`) into the programs
:mod:`gguf_audit.llama.loader_sim` runs, and writes ``gguf_audit/llama/<build>-tensors.json``.

An architecture is **modelled** when its whole function translates and every name it
reads is one :mod:`gguf_audit.llama.hparams_env` derives from a file's keys the way
``load_hparams`` does; otherwise it is listed under ``unmodelled`` with the first reason,
and no check judges its tensors. For every class the generator also records the
``hparams`` fields its ``load_arch_hparams`` reads from a key (``fields``), and the ones it
sets any other way (``computed``: their values are not derived, so a program needing one
judges nothing).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gguf_audit.llama.arch_stops import PRESENT
from gguf_audit.llama.cxx import Untranslatable, parse_body, strip_comments
from gguf_audit.llama.gen_stops import _statements, field_defaults, hparams_stops
from gguf_audit.llama.generate import (
    GenerateError,
    _block,
    _hparams_field_types,
    _model_classes,
    _pairs,
    _required_reads,
    _tensor_template,
)
from gguf_audit.llama.hparams_env import DERIVED, KNOWN_NAMES, RECURRENT_BY_RULE, RECURRENT_WITHOUT_KV_HEADS
from gguf_audit.llama.loader_sim import set_names

__all__ = ["generate_tensors", "main"]

_HELPERS = ("create_tensor_qkv", "create_tensor_gate_up_exps")


def _bodies(text: str, pattern: str) -> Iterator[tuple[re.Match[str], str]]:
    """Each match of ``pattern`` (ending on a function's opening brace) with the function body."""
    for m in re.finditer(pattern, text):
        start = m.end() - 1
        depth = 0
        for j in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                yield m, text[start : j + 1]
                break


def _helpers(model_cpp: str, ids: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _HELPERS:
        found = list(_bodies(model_cpp, rf"void\s+llama_model_base::{name}\(([^)]*)\)\s*\{{"))
        if not found:
            raise GenerateError(f"llama_model_base::{name} not found")
        m, body = found[0]
        params = [re.split(r"[\s&*]+", p.strip())[-1] for p in m.group(1).split(",")]
        # The first parameter is the layer (llama_layer & layer): its fields are the caller's variables.
        out[name] = {"params": params[1:], "body": parse_body(body, ids)}
    return out


def _names(node: Any, into: set[str]) -> set[str]:
    """Every name a program reads (not the ones it sets)."""
    if isinstance(node, str):
        into.add(node)
    elif isinstance(node, list) and node and isinstance(node[0], list):
        for statement in node:  # a block
            _names(statement, into)
    elif isinstance(node, list) and node:
        head = node[0]
        if head == "t":
            for part in (node[3], node[4], *node[5], node[6]):
                _names(part, into)
        elif head == "s":
            pass
        elif head == "fn":
            into.add(node[1].removesuffix(".c_str"))
            for a in node[2]:
                _names(a, into)
        elif head == "let":
            _names(node[2], into)
        elif head == "for":
            _names(node[2], into)
            _names(node[3], into)
            _names(node[4], into)
        elif head in ("call", "stop"):
            for a in node[2] if head == "call" else ():
                _names(a, into)
        else:
            for part in node[1:]:
                _names(part, into)
    return into


def _class_bodies(src: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Per class: its load_arch_tensors body, its load_arch_hparams body, and its base class."""
    headers = (src / "src" / "models" / "models.h").read_text()
    bases = dict(re.findall(r"struct\s+(llama_model_\w+)\s*:\s*public\s+(llama_model_\w+)", headers))
    tensors: dict[str, str] = {}
    hparams: dict[str, str] = {}
    for cpp in sorted((src / "src" / "models").glob("*.cpp")):
        text = cpp.read_text()
        for m, body in _bodies(text, r"void\s+(llama_model_\w+)::load_arch_tensors\([^)]*\)\s*\{"):
            tensors[m.group(1)] = body
        for m, body in _bodies(text, r"void\s+(llama_model_\w+)::load_arch_hparams\([^)]*\)\s*\{"):
            hparams[m.group(1)] = body
    return tensors, hparams, bases


def _inherited(cls: str, own: dict[str, str], bases: dict[str, str]) -> str | None:
    seen = cls
    while seen not in own and seen in bases:
        seen = bases[seen]
    return own.get(seen)


# What sets the recurrent layers: an element assigned, the array read from a key, or set_recr_pattern (a read such
# as lfm2's is_swa_impl[il] = !is_recr_impl[il] is none of them).
_RECR_ANY = re.compile(r"is_recr_impl\s*(?:\[[^\]]*\]\s*)?=(?!=)|is_recr_impl\s*,|set_recr_pattern")
_RECR_BY_HEADS = re.compile(r"hparams\.is_recr_impl\[(\w+)\]\s*=\s*hparams\.n_head_kv\(\1\)\s*==\s*0\s*;")
_GET_KEY = re.compile(r"ml\.(?:get_key_or_arr|get_key|get_arr)\(\s*(LLM_KV_\w+)\s*,\s*hparams\.(\w+)")
_ASSIGNED = re.compile(r"hparams\.(\w+)\s*(?:\[[^\]]*\]\s*)?(?:=(?!=)|\+=|-=|\*=|/=|\.begin\(\))")


def _fields(body: str, kv: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The hparams fields ``body`` reads from a key (field: key template), and those it sets otherwise."""
    flat = strip_comments(body)
    reads: dict[str, set[str]] = {}
    for key, fld in _GET_KEY.findall(flat):
        reads.setdefault(fld, set()).add(kv.get(key, "?").replace("%s", "{arch}"))
    computed = set(_ASSIGNED.findall(flat))
    for fn, fld in (("set_swa_pattern", "is_swa_impl"), ("load_swa_pattern", "is_swa_impl")):
        if fn in flat:
            computed.add(fld)
    if "set_recr_pattern" in flat:
        computed.add("is_recr_impl")
    computed |= {f for f, keys in reads.items() if len(keys) > 1 or "?" in keys}
    fields = {f: keys.pop() for f, keys in sorted(reads.items()) if f not in computed}
    fields.update(_derived(flat, fields, computed, reads))
    computed -= set(fields)
    # The hybrid models' one rule for their recurrent layers: a layer without key/value heads, or a loop's
    # condition on each layer (nemotron_h: no key/value heads and no feed-forward).
    if len(_RECR_ANY.findall(flat)) == 1 and "is_recr_impl" not in reads:
        rule = RECURRENT_WITHOUT_KV_HEADS if _RECR_BY_HEADS.search(flat) else _recr_loop(flat, fields)
        if rule is not None:
            computed.discard("is_recr_impl")
            fields["is_recr_impl"] = rule
    return fields, sorted(computed)


_RECR_LOOP = re.compile(
    r"for\s*\(\s*(?:uint32_t|int|auto)?\s*(\w+)\s*=\s*0\s*;\s*\1\s*<\s*([^;]+);\s*\+\+\1\s*\)\s*\{\s*"
    r"hparams\.is_recr_impl\[\1\]\s*=\s*([^;]+);\s*\}"
)


def _recr_loop(flat: str, fields: dict[str, str]) -> str | None:
    """``for (i = 0; i < END; ++i) { hparams.is_recr_impl[i] = EXPR; }`` as :data:`RECURRENT_BY_RULE`, when
    END and EXPR read only names the environment gives."""
    m = _RECR_LOOP.search(flat)
    if m is None:
        return None
    var, end, expr = m.groups()
    try:
        [[_, _, end_tree]] = parse_body("{ v = " + end + "; }", {})
        [[_, _, rule_tree]] = parse_body("{ v = " + expr + "; }", {})
    except (Untranslatable, ValueError):
        return None
    known = KNOWN_NAMES | {f"hparams.{f}" for f in fields} | {var}
    if not (_names(end_tree, set()) | _names(rule_tree, set())) <= known:
        return None
    return RECURRENT_BY_RULE + json.dumps([var, end_tree, rule_tree])


_SET_ONCE = re.compile(r"hparams\.(\w+)\s*=(?!=)\s*([^;]+);")


def _derived(flat: str, fields: dict[str, str], computed: set[str], reads: dict[str, set[str]]) -> dict[str, str]:
    """The fields ``flat`` (a ``load_arch_hparams`` body) sets once, unconditionally, from names the
    environment gives (lfm2's ``hparams.n_layer_dense_lead = hparams.n_layer();``), each as
    :data:`~gguf_audit.llama.hparams_env.DERIVED` and its translated expression."""
    out: dict[str, str] = {}
    known = KNOWN_NAMES | {f"hparams.{f}" for f in fields}
    for _, statement in _statements(flat[flat.find("{") :]):
        m = _SET_ONCE.fullmatch(statement)
        if m is None:
            continue
        fld, expr = m.groups()
        if fld not in computed or fld in reads or _ASSIGNED.findall(flat).count(fld) != 1:
            continue
        try:
            [[_, _, tree]] = parse_body("{ v = " + expr + "; }", {})
        except (Untranslatable, ValueError):
            continue
        names = _names(tree, set())
        if names - {"true", "false", "nullptr", "NULL"} and names <= known:
            out[fld] = DERIVED + json.dumps(tree)
    return out


def _defaults(hparams_h: str) -> dict[str, int]:
    """The llama_hparams fields with an integer initializer (``uint32_t n_ff_shexp = 0;``), and its value."""
    out: dict[str, int] = {}
    for name, value in re.findall(
        r"^\s*(?:uint32_t|int32_t|uint64_t|int|bool)\s+(\w+)\s*=\s*(\d+|true|false)\s*;", hparams_h, re.M
    ):
        out[name] = {"true": 1, "false": 0}.get(value, 0) if value in ("true", "false") else int(value)
    return out


def _with_arch(node: Any, numbers: dict[str, int], arch_id: str) -> Any:
    """``node`` with ``arch`` and the ``LLM_ARCH_*`` names as numbers: a program is one architecture's."""
    if isinstance(node, str):
        if node == "arch":
            return numbers[arch_id]
        return numbers.get(node, node)
    if isinstance(node, list):
        return [_with_arch(part, numbers, arch_id) for part in node]
    return node


def _translate(
    body: str, ids: dict[str, str], helpers: dict[str, Any], fields: dict[str, str], arch: tuple[dict[str, int], str]
) -> tuple[list[Any] | None, str | None]:
    try:
        program = _with_arch(parse_body(body, ids), *arch)
    except Untranslatable as e:
        return None, str(e)
    sets = set_names(program, set()) | {"i"}
    for spec in helpers.values():
        sets |= set(spec["params"]) | set_names(spec["body"], set())
    unknown = sorted(_names(program, set()) - sets - KNOWN_NAMES - {f"hparams.{f}" for f in fields})
    if unknown:
        return None, f"needs {', '.join(unknown[:4])}"
    return program, None


def _presence(key: str, field: str, kv: dict[str, str], typed: dict[str, list[Any]]) -> str | None:
    """The name :mod:`gguf_audit.llama.arch_stops` answers with whether the file has ``key`` (``LLM_KV_*``),
    read into ``hparams.<field>`` (its type)."""
    if key not in kv or field not in typed:
        return None
    return f"{PRESENT}{kv[key].replace('%s', '{arch}')}:{typed[field][0]}"


def generate_tensors(src: Path, *, build: str) -> dict[str, Any]:
    """The tensor programs of the llama.cpp tree at ``src``, stamped with ``build``."""
    arch_cpp = (src / "src" / "llama-arch.cpp").read_text()
    model_cpp = (src / "src" / "llama-model.cpp").read_text()
    arch_ids = _pairs(_block(arch_cpp, "LLM_ARCH_NAMES = {", "LLM_ARCH_NAMES"), "LLM_ARCH_", "LLM_ARCH_NAMES")
    kv = _pairs(_block(arch_cpp, "LLM_KV_NAMES = {", "LLM_KV_NAMES"), "LLM_KV_", "LLM_KV_NAMES")
    tensor_ids = _pairs(_block(arch_cpp, "LLM_TENSOR_NAMES = {", "LLM_TENSOR_NAMES"), "LLM_TENSOR_", "tensors")
    ids = {k: _tensor_template(v) for k, v in tensor_ids.items()}
    helpers = _helpers(model_cpp, ids)
    classes = _model_classes(model_cpp)
    tensor_bodies, hparams_bodies, bases = _class_bodies(src)
    programs: dict[str, Any] = {}
    unmodelled: dict[str, str] = {}
    stops: dict[str, Any] = {}
    hparams_h = (src / "src" / "llama-hparams.h").read_text()
    field_types, typed = _hparams_field_types(hparams_h), field_defaults(hparams_h)
    numbers = {a: n for n, a in enumerate(sorted(arch_ids))}
    for arch_id, arch in sorted(arch_ids.items(), key=lambda p: p[1]):
        cls = classes.get(arch_id)
        if cls is None:
            continue
        body = _inherited(cls, tensor_bodies, bases)
        if body is None:
            unmodelled[arch] = "no load_arch_tensors"
            continue
        hparams_body = _inherited(cls, hparams_bodies, bases) or ""
        fields, computed = _fields(hparams_body, kv)
        found, reads = hparams_stops(
            hparams_body,
            fields,
            computed,
            lambda prefix: _required_reads(prefix, field_types, kv),
            lambda prefix: _required_reads(prefix, field_types, kv, optional=True),
            lambda key, field: _presence(key, field, kv, typed),
        )
        if found:
            read = sorted(r.removeprefix("hparams.") for r in reads)
            types = {f: typed[f] for f in read if f in typed and f in fields}
            stops[arch] = {"fields": fields, "computed": computed, "types": types, "stops": found}
        program, why = _translate(body, ids, helpers, fields, (numbers, arch_id))
        reads = _names(program, set()) if program is not None else set()
        rule = fields.get("is_recr_impl", "")
        if "hparams.is_recr" in reads and not (
            rule == RECURRENT_WITHOUT_KV_HEADS or rule.startswith(RECURRENT_BY_RULE)
        ):
            program, why = None, "its recurrent layers are not the ones without key/value heads"
        elif any(f"hparams.{f}" in reads for f in computed):
            program, why = (
                None,
                f"it reads {', '.join(sorted(f for f in computed if f'hparams.{f}' in reads))}, computed",
            )
        if program is None:
            unmodelled[arch] = why or "?"
            continue
        programs[arch] = {"class": cls, "fields": fields, "computed": computed, "program": program}
    if not programs:
        raise GenerateError("no load_arch_tensors translated")
    return {
        "build": build,
        "source": "ggml-org/llama.cpp load_arch_tensors, read by python -m gguf_audit.llama.gen_tensors",
        "helpers": helpers,
        "defaults": _defaults((src / "src" / "llama-hparams.h").read_text()),
        "architectures": programs,
        "unmodelled": unmodelled,
        "hparams_stops": stops,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gguf_audit.llama.gen_tensors", description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="the llama.cpp source tree (the one the oracle was built from)")
    parser.add_argument("--build", required=True, help="its build number, e.g. b11312")
    parser.add_argument("--out", type=Path, help="where to write (default: gguf_audit/llama/<build>-tensors.json)")
    args = parser.parse_args(argv)
    try:
        tables = generate_tensors(args.src, build=args.build)
    except (GenerateError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    out = args.out or Path(__file__).with_name(f"{args.build}-tensors.json")
    out.write_text(json.dumps(tables, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
    n_arch = len(tables["architectures"])
    print(f"{out}: {n_arch} architectures modelled, {len(tables['unmodelled'])} unmodelled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
