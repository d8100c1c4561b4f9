"""Tests of the agreement measures, labels and their join with scores (issue 29)."""
