"""Three real nights of a small collection with known changes, shared by the report, diff and export tests.

- night 1: two single files, a complete two-shard set; all clean.
- night 2: the download is truncated, the set's second shard is gone, and a file
  whose name and metadata hold HTML payloads appears (``<img onerror=...>`` in its
  file name, ``<script>`` in ``general.name`` and in its chat template).
- night 3: the download is complete again, the shard is back, the payload file is
  gone, a mirror copy appears.

Every payload, if it ever ran, would write :data:`MARK` into the document; the
payloads spell it in two halves (``'PW'+'NED'``), so the text itself never holds it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gguf_audit.format.model import ValueType
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like

MARK: Final = "PWNED"
RUN_JS: Final = "document.body.append('PW'+'NED')"
PAYLOAD_FILE: Final = f"evil<img src=x onerror={RUN_JS}>-Q4_K_M.gguf"
PAYLOAD_NAME: Final = f'<script>{RUN_JS}</script><img src=x onerror="{RUN_JS}">'
PAYLOAD_TEMPLATE: Final = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}"
    f"<script>{RUN_JS}</script><svg onload=\"{RUN_JS}\"></svg><img src=x onerror='{RUN_JS}'>"
)
SINGLE: Final = "tiny-llama-Q4_K_M.gguf"
DOWNLOAD: Final = "downloads/tiny-llama-Q4_K_M.gguf"
SHARD_1: Final = "sharded/complete-00001-of-00002.gguf"
SHARD_2: Final = "sharded/complete-00002-of-00002.gguf"
MIRROR: Final = "mirror/tiny-llama-Q4_K_M.gguf"


def payload_file() -> bytes:
    """The tiny llama with the payloads in ``general.name`` and ``tokenizer.chat_template``."""
    kvs, tensors = tiny_llama_like()
    kvs = [kv_str("general.name", PAYLOAD_NAME) if kv.key == "general.name" else kv for kv in kvs]
    kvs.append(kv_str("tokenizer.chat_template", PAYLOAD_TEMPLATE))
    assert all(kv.vtype != ValueType.ARRAY or kv.key != "general.name" for kv in kvs)
    return build_gguf(kvs, tensors)


@dataclass(frozen=True)
class Nights:
    out: Path
    collection: Path
    runs: tuple[str, str, str]

    def url(self, rel: str) -> str:
        return "file://" + str(self.collection / rel)


def scan_three_nights(client: Any, root: Path, sample: dict[str, bytes]) -> Nights:
    collection, out = root / "collection", root / "out"
    llama = sample["tiny-llama-Q4_K_M.gguf"]
    first = {
        SINGLE: llama,
        DOWNLOAD: llama,
        SHARD_1: sample[SHARD_1],
        SHARD_2: sample[SHARD_2],
    }
    for rel, data in first.items():
        (collection / rel).parent.mkdir(parents=True, exist_ok=True)
        (collection / rel).write_bytes(data)

    def night() -> str:
        config = ScanConfig(roots=(str(collection),), out=str(out), incremental=True, samples=False)
        return run_scan(config, client=client).run_id

    one = night()
    (collection / DOWNLOAD).write_bytes(llama[: len(llama) * 3 // 5])
    (collection / SHARD_2).unlink()
    (collection / PAYLOAD_FILE).write_bytes(payload_file())
    two = night()
    (collection / DOWNLOAD).write_bytes(llama)
    (collection / SHARD_2).write_bytes(sample[SHARD_2])
    (collection / PAYLOAD_FILE).unlink()
    (collection / MIRROR).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(collection / SINGLE, collection / MIRROR)
    three = night()
    return Nights(out, collection, (one, two, three))
