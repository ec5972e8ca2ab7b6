"""Byte I/O: sources that serve ranges of one file, the error table, header reads and block reads.

The one layer that talks to storage (through fsspec); everything under it is pure.
"""
