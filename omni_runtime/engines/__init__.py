"""The drivers: ``Engine`` (synchronous, ``engine.py``) and ``AsyncEngine`` (asyncio, ``async_engine.py``) around one
``Host`` (the orchestrator, its runtimes and the client's mailboxes), and the watchdog that bounds every wait."""
