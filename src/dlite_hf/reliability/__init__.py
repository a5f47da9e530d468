"""Randomised losslessness checks: random option mixes for ``generate()`` run plainly and drafted, judged case by case
(:mod:`.cases` draws them, :mod:`.verdict` judges one, :mod:`.suite` runs many and writes the report)."""
