"""``actorwire bench``: a harness (``_harness``) and one module per suite, each with its baseline."""
