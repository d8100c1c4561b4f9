"""Knowing when to trust the judge: human labels, agreement measures, pair win rates."""
