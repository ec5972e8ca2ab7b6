"""The hyperparameters a ``load_arch_tensors`` reads, derived from a file's keys as ``load_hparams`` derives them.

``llama_model_base::load_hparams`` (``src/llama-model.cpp``) reads the keys every
architecture has; ``LLAMA_LOAD_LOCALS`` (``src/llama-model.h``) and the
``llama_hparams`` methods (``src/llama-hparams.cpp``) turn them into the names the
tensor loaders use. :class:`HeaderEnv` gives those names for one file; a name
whose value it cannot derive (a key of the wrong type, a per-layer array of the
wrong length, a field the architecture's own ``load_arch_hparams`` computes)
raises :class:`~gguf_audit.llama.loader_sim.Unmodelled`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np

from gguf_audit.format.model import Header, StringArray, ValueType
from gguf_audit.llama.loader_sim import BINARY_OPS, Unmodelled

__all__ = ["DERIVED", "KNOWN_NAMES", "RECURRENT_BY_RULE", "RECURRENT_WITHOUT_KV_HEADS", "HeaderEnv"]

RECURRENT_BY_RULE: Final = "=rule:"
"""``fields["is_recr_impl"]`` set by a loop over the layers (``for (i = 0; i < END; ++i) is_recr_impl[i] =
EXPR;``): this prefix, then ``[i, END, EXPR]`` as JSON; a layer at or past END keeps the initial 0 (the
hybrids are not ``llm_arch_is_recurrent``)."""

DERIVED: Final = "=expr:"
"""``fields[f]`` of a field the architecture's ``load_arch_hparams`` sets once from other values
(``hparams.n_layer_dense_lead = hparams.n_layer();``): this prefix, then the expression as JSON."""

_OPS: Final[dict[str, Callable[[int, int], int]]] = {
    **{op: BINARY_OPS[op] for op in ("+", "-", "*", "==", "!=", "<", "<=", ">", ">=")},
    "&&": lambda p, q: int(bool(p) and bool(q)),
    "||": lambda p, q: int(bool(p) or bool(q)),
}

RECURRENT_WITHOUT_KV_HEADS: Final = "=n_head_kv(il) == 0"
"""``fields["is_recr_impl"]`` of an architecture whose recurrent layers are those without key/value heads
(``hparams.is_recr_impl[il] = hparams.n_head_kv(il) == 0``: lfm2, granitehybrid, plamo2, ...)."""

_ROPE_TYPES: Final = {"none": 0, "linear": 1, "yarn": 2, "longrope": 3}

# The llama_hparams fields read from a key in llama_model_base::load_hparams (or left at their
# default there, or by an architecture's own load_arch_hparams), with the key and default.
_BASE_KEYS: Final = {
    "n_embd": ("{arch}.embedding_length", None),
    "n_layer_all": ("{arch}.block_count", None),
    "n_layer_nextn": ("{arch}.nextn_predict_layers", 0),
    "n_expert": ("{arch}.expert_count", 0),
    "n_ctx_train": ("{arch}.context_length", None),
    "n_embd_out_impl": ("{arch}.embedding_length_out", 0),
}
_NO_SINGLE_EXPERT: Final = frozenset({"hunyuan-dense", "hunyuan_vl"})
_ARCH_DEFAULTS: Final = {"n_ff_shexp": 0, "n_expert_shared": 0, "n_layer_dense_lead": 0, "n_ff_exp_arr": 0}
_LAYER_ARRAYS: Final = {
    "n_head_arr": "{arch}.attention.head_count",
    "n_ff_arr": "{arch}.feed_forward_length",
    "n_expert_used_arr": "{arch}.expert_used_count",
    "n_ff_exp_arr": "{arch}.expert_feed_forward_length",
}
_LOCALS: Final = {
    "n_layer": "hparams.n_layer",
    "n_head": "hparams.n_head",
    "n_head_kv": "hparams.n_head_kv",
    "n_embd_k_gqa": "hparams.n_embd_k_gqa",
    "n_embd_v_gqa": "hparams.n_embd_v_gqa",
    "n_embd_gqa": "hparams.n_embd_v_gqa",
    "n_embd_head_k": "hparams.n_embd_head_k",
    "n_embd_head_v": "hparams.n_embd_head_v",
    "n_ff": "hparams.n_ff",
    "n_rot": "hparams.n_rot",
    "n_expert_used": "hparams.n_expert_used",
    "n_layer_all": "hparams.n_layer_all",
    "n_layer_nextn": "hparams.n_layer_nextn",
    "n_embd": "hparams.n_embd",
    "n_expert": "hparams.n_expert",
    "n_ctx_train": "hparams.n_ctx_train",
}
_FUNCTIONS: Final = frozenset(
    {
        "hparams.n_layer",
        "hparams.n_head",
        "hparams.n_head_kv",
        "hparams.n_ff",
        "hparams.n_ff_exp",
        "hparams.n_expert_used",
        "hparams.n_embd_head_k",
        "hparams.n_embd_head_v",
        "hparams.n_embd_k_gqa",
        "hparams.n_embd_v_gqa",
        "hparams.n_rot",
        "hparams.is_swa",
        "hparams.is_recr",
        "hparams.n_embd_out",
        "hparams.is_mla",
        "hparams.n_embd_head_k_mla",
        "hparams.n_embd_head_v_mla",
        "std::max",
        "std::min",
    }
)
_FIELDS: Final = frozenset(
    {f"hparams.{f}" for f in (*_BASE_KEYS, *_ARCH_DEFAULTS, "rope_scaling_type_train") if not f.endswith("_arr")}
)

_DEFAULTED: Final = frozenset({"hparams.dense_2_feat_out", "hparams.dense_3_feat_in"})
"""Fields no ``load_hparams`` sets (at their ``llama-hparams.h`` initial value unless the architecture reads them)."""

_OTHER_FIELDS: Final = frozenset({*_DEFAULTED, "hparams.n_cls_out"})

KNOWN_NAMES: Final = frozenset(
    {
        *_LOCALS,
        "n_vocab",
        "n_token_types",
        "ml.load_mtp",
        "std::to_string",
        "ml.get_weight",
        *_OTHER_FIELDS,
        *_FUNCTIONS,
        *_FIELDS,
        *(f"LLAMA_ROPE_SCALING_TYPE_{n.upper()}" for n in _ROPE_TYPES),
    }
    | {"nullptr", "NULL", "true", "false", "TENSOR_NOT_REQUIRED", "TENSOR_DUPLICATED", "TENSOR_SKIP"}
    | {"TENSOR_SKIP_IF_VIRTUAL", "TENSOR_ALLOW_RESHAPE", "TENSOR_READ_LAZY"}
)
"""Every name a translated program may read: :class:`HeaderEnv` answers each (or says it cannot)."""


class HeaderEnv:
    """The hyperparameters of one file of architecture ``arch``, for :func:`~gguf_audit.llama.loader_sim.simulate`.

    ``fields`` and ``computed`` are the architecture's (``<build>-tensors.json``): the fields its
    ``load_arch_hparams`` reads from a key, and the ones it sets otherwise (never derived here);
    ``defaults`` the initial value of each ``llama_hparams`` field that has one.
    """

    def __init__(
        self,
        header: Header,
        arch: str,
        fields: Mapping[str, str],
        computed: Sequence[str],
        defaults: Mapping[str, int],
    ) -> None:
        self.h = header
        self.defaults = defaults
        self.arch = arch
        self.fields = fields
        self.computed = frozenset(computed)
        self.cache: dict[str, object] = {}
        self.memo: dict[tuple[object, ...], int] = {}

    def __call__(self, name: str, args: Sequence[int]) -> int:
        memo = (name, *args)
        got = self.memo.get(memo)
        if got is None:
            got = self.memo[memo] = self.value(name, args)
        return got

    def value(self, name: str, args: Sequence[int]) -> int:
        """The value of ``name`` (a per-layer function at ``args``), not remembered."""
        if name in _LOCALS:
            return self.fn(_LOCALS[name], 0) if _LOCALS[name] in _FUNCTIONS else self.field(_LOCALS[name][8:])
        if name == "ml.load_mtp":
            return 0  # llama_model_default_params: the MTP layers are not loaded
        if name == "n_token_types":
            return self.scalar("tokenizer.ggml.token_type_count", 0)
        if name == "n_vocab":
            kv = self.h.metadata.get("tokenizer.ggml.tokens")
            if kv is None or not isinstance(kv.value, StringArray):
                raise Unmodelled("no token list")
            return len(kv.value)
        if name.startswith("LLAMA_ROPE_SCALING_TYPE_"):
            return _ROPE_TYPES[name.removeprefix("LLAMA_ROPE_SCALING_TYPE_").lower()]
        if name in ("std::max", "std::min"):
            return max(args) if name == "std::max" else min(args)
        if name in _FUNCTIONS:
            return self.fn(name, args[0] if args else 0)
        if name in _FIELDS or name.removeprefix("hparams.") in self.fields or name in _OTHER_FIELDS:
            return self.field(name.removeprefix("hparams."))
        raise Unmodelled(f"the value {name!r}")

    # the fields of llama_hparams
    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def scalar(self, template: str, default: int | None) -> int:
        kv = self.h.metadata.get(self.key(template))
        if kv is None:
            if default is None:
                raise Unmodelled(f"{self.key(template)} is absent")
            return default
        if kv.type not in (ValueType.UINT32, ValueType.INT32) or not isinstance(kv.value, int):
            raise Unmodelled(f"{self.key(template)} is not a 32-bit integer")
        return int(kv.value)

    def per_layer(self, template: str, default: int) -> tuple[int, ...]:
        n_all = self.field("n_layer_all")
        kv = self.h.metadata.get(self.key(template))
        if kv is None:
            return (default,) * n_all
        if kv.type in (ValueType.UINT32, ValueType.INT32) and isinstance(kv.value, int):
            return (int(kv.value),) * n_all
        if kv.type is ValueType.ARRAY and kv.item_type in (ValueType.UINT32, ValueType.INT32):
            values = kv.value
            if isinstance(values, np.ndarray) and len(values) == n_all:
                return tuple(int(x) for x in values.tolist())
        raise Unmodelled(f"{self.key(template)} is not a value or an array of one per layer")

    def field(self, name: str) -> int:
        if name in self.computed or (name + "_arr") in self.computed:
            raise Unmodelled(f"hparams.{name} is computed by the architecture")
        if name in self.fields:
            if self.fields[name].startswith(DERIVED):
                return self.evaluate(json.loads(self.fields[name].removeprefix(DERIVED)))
            default = self.defaults.get(name, _ARCH_DEFAULTS.get(name))
            return self.scalar(self.fields[name], default)
        if name in _BASE_KEYS:
            value = self.scalar(*_BASE_KEYS[name])
            if name == "n_expert" and self.arch in _NO_SINGLE_EXPERT and value <= 1:
                return 0  # load_hparams: one expert is none for these
            return value
        if name in _ARCH_DEFAULTS:
            return _ARCH_DEFAULTS[name]
        if name == "n_cls_out":
            labels = self.h.metadata.get(self.key("{arch}.classifier.output_labels"))
            if labels is None:
                return self.defaults.get(name, 1)
            if not isinstance(labels.value, StringArray):
                raise Unmodelled("the classifier labels")
            return len(labels.value) or self.defaults.get(name, 1)
        if name in self.defaults and f"hparams.{name}" in _DEFAULTED:
            return self.defaults[name]
        if name == "rope_scaling_type_train":
            kv = self.h.metadata.get(self.key("{arch}.rope.scaling.type"))
            rope = "linear" if kv is None else self.h.get_str(self.key("{arch}.rope.scaling.type"))
            if rope is None or rope not in _ROPE_TYPES:
                raise Unmodelled("the rope scaling type")
            return _ROPE_TYPES[rope]
        raise Unmodelled(f"hparams.{name}")

    def array(self, name: str) -> tuple[int, ...]:
        if name in self.computed:
            raise Unmodelled(f"hparams.{name} is computed by the architecture")
        if name not in self.cache:
            if name == "n_head_kv_arr":
                has_kv = self.h.metadata.get(self.key("{arch}.attention.head_count_kv")) is not None
                value = self.per_layer("{arch}.attention.head_count_kv", 0) if has_kv else self.array("n_head_arr")
            elif name in self.fields:
                value = self.per_layer(self.fields[name], 0)
            elif name == "n_ff_exp_arr":
                value = (0,) * self.field("n_layer_all")
            else:
                value = self.per_layer(_LAYER_ARRAYS[name], 0)
            self.cache[name] = value
        got = self.cache[name]
        assert isinstance(got, tuple)
        return got

    def head_dims(self, il: int) -> tuple[int, int, int]:
        """n_embd_head_k, n_embd_head_v and n_rot of layer ``il``.

        A sliding-window layer's differ only by the ``*_swa`` keys (or an architecture that computes
        them): without those, whether the layer slides does not matter, so it is not asked.
        """
        swa_keys = ("attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa")
        swa_fields = ("n_embd_head_k_swa", "n_embd_head_v_swa", "n_rot_swa")
        if any(self.key("{arch}." + k) in self.h.metadata for k in swa_keys) or any(
            f in self.fields or f in self.computed for f in swa_fields
        ):
            self.is_swa(il)
        n_head = self.array("n_head_arr")[0]
        if not n_head:
            return 0, 0, 0
        default = self.field("n_embd") // n_head
        k = self.scalar_field("n_embd_head_k_full", "{arch}.attention.key_length", default)
        v = self.scalar_field("n_embd_head_v_full", "{arch}.attention.value_length", default)
        return k, v, self.scalar_field("n_rot_full", "{arch}.rope.dimension_count", k)

    def scalar_field(self, name: str, template: str, default: int) -> int:
        if name in self.computed:
            raise Unmodelled(f"hparams.{name} is computed by the architecture")
        if self.fields.get(name, "").startswith(DERIVED):
            return self.field(name)
        return self.scalar(self.fields.get(name, template), default)

    def evaluate(self, e: object, bound: Mapping[str, int] | None = None) -> int:
        """A derived field's expression (:data:`DERIVED`, :data:`RECURRENT_BY_RULE`): numbers, names (``bound``
        first: a loop's variable), calls and the plain operators."""
        if isinstance(e, int):
            return e
        if isinstance(e, str):
            return bound[e] if bound and e in bound else self(e, ())
        if not isinstance(e, list) or not e:
            raise Unmodelled(f"the expression {e!r}")
        if e[0] == "fn":
            return self(str(e[1]), tuple(self.evaluate(a, bound) for a in e[2]))
        if e[0] == "!" and len(e) == 2:
            return int(not self.evaluate(e[1], bound))
        if e[0] in _OPS and len(e) == 3:
            return _OPS[e[0]](self.evaluate(e[1], bound), self.evaluate(e[2], bound))
        raise Unmodelled(f"the operator {e[0]!r}")

    def mla(self) -> tuple[int, int] | None:
        """The MLA head sizes (``n_embd_head_k_mla_impl``, ``..._v_...``) when both are set (``is_mla``)."""
        k = self.field("n_embd_head_k_mla_impl") if "n_embd_head_k_mla_impl" in self.fields else 0
        v = self.field("n_embd_head_v_mla_impl") if "n_embd_head_v_mla_impl" in self.fields else 0
        if "n_embd_head_k_mla_impl" in self.computed or "n_embd_head_v_mla_impl" in self.computed:
            raise Unmodelled("the MLA head sizes are computed by the architecture")
        return (k, v) if k and v else None

    def is_recr(self, il: int) -> bool:
        rule = self.fields.get("is_recr_impl", "")
        if rule.startswith(RECURRENT_BY_RULE):
            var, end, expr = json.loads(rule.removeprefix(RECURRENT_BY_RULE))
            return il < self.evaluate(end) and bool(self.evaluate(expr, {var: il}))
        if rule != RECURRENT_WITHOUT_KV_HEADS:
            raise Unmodelled("the recurrent layers")
        return self.array("n_head_kv_arr")[il] == 0

    def is_swa(self, il: int) -> bool:
        if "is_swa_impl" in self.computed or "swa_type" in self.computed:
            raise Unmodelled("the sliding-window layers")
        return False

    def fn(self, name: str, il: int) -> int:
        n_all = self.field("n_layer_all")
        if not 0 <= il < n_all:
            raise Unmodelled(f"layer {il} of {n_all}")
        simple: dict[str, Callable[[], int]] = {
            "hparams.n_layer": lambda: n_all - self.field("n_layer_nextn"),
            "hparams.n_head": lambda: self.array("n_head_arr")[il],
            "hparams.n_head_kv": lambda: self.array("n_head_kv_arr")[il],
            "hparams.n_ff": lambda: self.array("n_ff_arr")[il],
            "hparams.n_ff_exp": lambda: self.array("n_ff_exp_arr")[il],
            "hparams.n_expert_used": lambda: self.array("n_expert_used_arr")[il],
            "hparams.n_embd_head_k": lambda: self.head_dims(il)[0],
            "hparams.n_embd_head_v": lambda: self.head_dims(il)[1],
            "hparams.n_rot": lambda: self.head_dims(il)[2],
            "hparams.n_embd_k_gqa": lambda: self.head_dims(il)[0] * self.array("n_head_kv_arr")[il],
            "hparams.n_embd_v_gqa": lambda: self.head_dims(il)[1] * self.array("n_head_kv_arr")[il],
            "hparams.is_swa": lambda: int(self.is_swa(il)),
            "hparams.is_recr": lambda: int(self.is_recr(il)),
            "hparams.n_embd_out": lambda: self.field("n_embd_out_impl") or self.field("n_embd"),
            "hparams.is_mla": lambda: int(self.mla() is not None),
            "hparams.n_embd_head_k_mla": lambda: (self.mla() or self.head_dims(0)[:2])[0],
            "hparams.n_embd_head_v_mla": lambda: (self.mla() or self.head_dims(0)[:2])[1],
        }
        return simple[name]()
