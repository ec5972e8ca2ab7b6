"""A real night of llama.cpp-made files through ``gguf-audit report``: the same weights grouped with the metadata
difference named, one copy of each chat template, and what each file claims of its making next to what the
night proved (the corpus's F32 file is the family's reference; its Q8_0 re-quantizes bit-exact, its IQ2_XXS
used an importance matrix)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan

pytestmark = pytest.mark.cluster

OLD, NEW = b"Conversation roles must alternate", b"Conversation turns must alternate"


def _collection(root: Path) -> dict[str, Path]:
    models = corpus_dir() / "models"
    if not models.exists():
        pytest.skip(f"the corpus is not here: {models}")
    q8 = (models / "tiny-llama-Q8_0.gguf").read_bytes()
    assert q8.count(OLD) == 1  # a same-length word swap keeps every offset: only the template changes
    files = {
        "ref/tiny-llama-F32.gguf": (models / "tiny-llama-F32.gguf").read_bytes(),
        "a/tiny-llama-Q8_0.gguf": q8,
        "b/tiny-llama-Q8_0.gguf": q8.replace(OLD, NEW),
        "c/renamed.gguf": q8,
        "a/tiny-llama-IQ2_XXS.gguf": (models / "tiny-llama-IQ2_XXS.gguf").read_bytes(),
    }
    paths = {}
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        paths[rel] = path
    return paths


def test_same_weights_templates_once_and_provenance_next_to_proof(client: Any, tmp_path: Path) -> None:
    paths = _collection(tmp_path / "collection")
    out = tmp_path / "out"
    run_scan(ScanConfig().replace(roots=(str(tmp_path / "collection"),), out=str(out)), client=client)
    page_path = tmp_path / "night.html"
    assert main(["report", str(out), "--html", str(page_path)]) == 0
    page = page_path.read_text(encoding="utf-8")
    url = {rel: "file://" + str(p) for rel, p in paths.items()}

    dup = page[page.index('<section id="s-duplicates">') :]
    dup = dup[: dup.index("</section>")]
    [group] = re.findall(r'<details class="dup".*?</details>', dup)
    assert "3 files; metadata differs in: template" in group
    rows = dict(re.findall(r'<tr><td class="url">([^<]+)</td><td class="url"></td><td>([^<]+)</td>', group))
    assert rows == {
        url["a/tiny-llama-Q8_0.gguf"]: "the group&#x27;s first (compared with)",
        url["b/tiny-llama-Q8_0.gguf"]: "template",
        url["c/renamed.gguf"]: "same",
    }

    templates = page[page.index('<section id="s-templates">') : page.index('<section id="s-duplicates">')]
    assert "2 distinct templates in 5 files" in templates
    assert page.count("Conversation roles must alternate") == 1 and page.count("Conversation turns must") == 1

    # Provenance (what the file says) next to proof (what the compare phase found), in each file's details.
    f32 = url["ref/tiny-llama-F32.gguf"]
    assert f"derivation from {f32}: derived" in page
    iq2 = page[page.index(f'<span class="url">{url["a/tiny-llama-IQ2_XXS.gguf"]}</span>') :]
    iq2 = iq2[: iq2.index("</details>")]
    assert "importance matrix: file imatrix.dat, dataset calib.txt, 14 entries, 40 chunks" in iq2
    assert f"derivation from {f32}: unprovable" in iq2
    shutil.rmtree(out)
