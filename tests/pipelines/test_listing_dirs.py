"""The directories a listing saw whole, as digests: membership as a frozenset's, at 16 bytes a directory."""

from __future__ import annotations

import tracemalloc

from gguf_audit.pipelines.listing.dirs import DirectoryDigests, DirectorySet
from gguf_audit.pipelines.spill._mapped import is_on_disk


def test_a_directory_set_answers_as_the_set_of_its_strings_would() -> None:
    dirs = [f"s3://bucket/org-{i // 7:04d}/model-{i:06d}" for i in range(150_000)]
    built = DirectoryDigests()
    for d in dirs + dirs[:1000]:  # more than one pending chunk, and directories seen again later
        built.add(d)
        built.add(d)  # a directory's next file: taken once
    held = built.build()
    assert len(held) == len(dirs)
    assert all(d in held for d in dirs[::997]) and dirs[-1] in held and dirs[0] in held
    for absent in ("s3://bucket/org-0000", "s3://bucket/org-0000/model-000000/", "s3://bucket/org-9999/x", ""):
        assert absent not in held
    assert 42 not in held  # not a string
    assert len(DirectorySet()) == 0 and "s3://a" not in DirectorySet()
    assert "s3://a" in DirectorySet(["s3://b", "s3://a"]) and len(DirectorySet(["s3://a", "s3://a"])) == 1


def test_a_directory_costs_its_digest_not_its_string() -> None:
    n = 100_000
    dirs = (f"file:///srv/models/organisation-{i // 10:05d}/some-model-{i:07d}-instruct" for i in range(n))
    tracemalloc.start()
    try:
        held = DirectoryDigests()
        held.update(dirs)
        kept = held.build()
        size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == n
    assert is_on_disk(kept._digests)  # 16 bytes a digest, in a file (a frozenset of the strings: about 150)
    assert size / n < 1  # none of them in the heap
    # a pending chunk of 65,536 digests as bytes objects (about 3.7 MB), and the final merge's two copies
    assert peak < 2 * 16 * n + (4 << 20)  # measured: 4.9 MB
