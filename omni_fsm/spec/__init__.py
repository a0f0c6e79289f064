"""The specification: everything that decides a transition or a drop. The closed vocabularies
(``vocabulary``), the events and observations, the records the guards read (``record``), the named
guards, the table (``table``), the policy around it (``policy``: intake, misses, slots), what each
effect does and whom it reaches (``effects``), and ``selection``, the table's row selection with the
guards inlined (generated from them). Nothing here runs a request; ``omni_fsm.engine`` does."""
