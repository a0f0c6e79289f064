"""Applications on the engines: ``omni-run`` (``cli``), its checked demo workload (``workload``) and the
text-to-image demo (``text2image``)."""
