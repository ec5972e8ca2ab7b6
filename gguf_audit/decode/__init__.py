"""Decoding, pure: ggml blocks to float32 bit for bit with ggml, scale checks, sampled blocks and their statistics.

``kernels`` decodes blocks, ``scales`` checks their scale fields, ``sampled``
decodes planned sample blocks, ``stats`` summarises values, ``error``
measures quantized values against a reference, ``requant`` re-quantizes a
reference's blocks to prove a file's derivation, ``fingerprints`` names a
file's weights and metadata. No I/O.
"""
