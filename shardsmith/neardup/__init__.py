"""Near-duplicates: the same part shot more than once, told from another part.

``hashing``: the hash frame, a fixture's background, two hashes a sample and the check of a
pair; ``search``: the candidate pairs of up to millions of hashes (multi-index hashing).
``insight.near_duplicates`` finds a dataset's clusters with them.  Why each piece is what it
is, with the measurements: docs/know-your-data.md, "Near-duplicates".
"""
