"""Layers that run another runtime elsewhere: ``process`` (a child process per replica) and ``ray`` (a Ray actor per
replica, across hosts). Each is a stage runtime itself; the runtime it hosts is named, never imported."""
