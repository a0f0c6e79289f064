"""The specification, as data: the closed vocabularies, the events and observations, the records the
guards read, the named guards and the table. Nothing here runs a request; ``omni_fsm.engine`` does."""
