"""Pure checks: functions that yield findings from a parsed header, the listed size and samples.

``header`` composes the header checks (``check_header``: ``structure``, then the
caller's chat-template audit, then the semantic ones: ``text``, ``metadata``,
``tensors``, ``tokenizer``, ``filetype``, over the ``facts`` gathered once and the
``arch`` table). ``data`` judges sampled blocks; ``shards`` a shard set as a whole.
"""
