"""What a run found, as data and as tables: the JSON report, check's table, merged
shards, the machine's fingerprint, doctor's findings, probe replays.
"""
