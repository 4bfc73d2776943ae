"""The soak's pure parts: its fault schedule, and its judgement of the guard against it.

schedule  the fault schedule file (TOML or JSON): what to inject, in which order, how
          often; a bad file is one line naming the entry
judge     the guard's decisions, the server's exits and the clients' failures held
          against the windows the schedule made: false ends, missed hangs, requests
          lost to false deaths

The traffic, the supervisor and the engines are ``harness.load.soak``'s; ``bench/soak.py``
is the command.
"""
