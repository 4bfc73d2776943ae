"""Starting, watching and stopping engines and servers, by pid: the harness.

Runs in pytest's process and in the commands' own.  No pytest here: failures are
exceptions the pytest side (``face/``) or the commands turn into a test's or a command's words.
"""
