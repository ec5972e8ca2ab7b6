"""Renderers: a file's audit, samples and comparison as text for a person or JSON for a program.

``format`` holds what every report shares (the one escape of untrusted text,
the one finding line, byte sizes); ``text`` and ``json`` build on it.
"""
