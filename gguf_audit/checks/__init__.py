"""Pure checks: functions that yield findings from a parsed header, the listed size and samples.

``header`` composes the header checks (``check_header``: ``structure``, then the
caller's chat-template audit, then the semantic ones: ``text``, ``metadata``,
``tensors``, ``hparams``, ``tokenizer``, ``vocab``, ``filetype``, ``clip``, over
the ``facts`` gathered once and the ``arch`` table). ``data`` judges sampled
blocks; ``shards`` a shard set as a whole; ``lineage`` and ``mmproj_pairing``
families and projector pairs across files; ``upstream`` and
``upstream_template`` a file against its upstream config; ``hub_gguf`` a header
against the Hub's card of it.
"""
