"""The specification: everything that decides a transition or a drop. The closed vocabularies
(``vocabulary``), the events and observations, the records the guards read (``record``), the named
guards, the table (``table``: its ``Spec`` carries the rows with the guard and effect functions they name),
the policy around it (``policy``: intake, misses, slots) and what each effect does and whom it reaches
(``effects``). Nothing here runs a request; ``omni_fsm.engine`` does."""
