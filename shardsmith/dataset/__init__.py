"""The dataset on disk: its manifest and sample records, the shard formats, and the lock and
state folder every command that writes a dataset takes (docs/format.md)."""
