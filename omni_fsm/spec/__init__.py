"""The specification: everything that decides a transition or a drop. The closed vocabularies
(``vocabulary``), the events and observations, the records the guards read (``record``), the named
guards, the table (``table``), the policy around it (``policy``: intake, misses, slots), what each
effect does and whom it reaches (``effects``), and ``selection``, the table's row selection with the
guards inlined, and ``programs``, each selector with its rows' effects run straight through (both generated
from them; ``cli/selectors.py``, ``cli/programs.py``). Nothing here runs a request; ``omni_fsm.engine`` does.

Importing the package gives each observation its generated ``__init__`` (``observation_inits``: the same values
as attrs' own, built with plain stores; ``cli/inits.py`` says how), and keeps attrs' own ones in
``ATTRS_INITS`` for the test that holds the two together."""

from omni_fsm.spec.observation_inits import INITS as _INITS


def _install_generated_inits() -> dict[type, object]:
    own = {cls: vars(cls)["__init__"] for cls in _INITS}
    for cls, init in _INITS.items():
        cls.__init__ = init  # type: ignore[misc]
    return own


#: attrs' own ``__init__`` of each observation (the generated ones replace them)
ATTRS_INITS = _install_generated_inits()
