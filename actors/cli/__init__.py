"""The ``actorwire`` command: argparse wiring in ``_main``, one module per command family."""
