"""Starting, watching and stopping engines and servers, by pid: the harness, in rooms by job.

``engines/`` starts, shares and stops them; ``judging/`` reads what they left and decides a
death's verdict; ``load/`` serves them under client load (the soak, the supervisor);
``probing/`` is the liveness probe and its trials.  ``waiting`` is the one way to wait,
``outputs`` the one writer of files, ``measure`` the engines ``enginedead calibrate`` runs.

Runs in pytest's process and in the commands' own.  No pytest here: failures are exceptions
the pytest side (``pytest_plugin/``) or the commands turn into a test's or a command's words.
"""
