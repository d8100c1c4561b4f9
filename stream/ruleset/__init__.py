"""The rule set: rule files as strict models, filters and sampling, the loader, and the
registries through which rule packs add their own checks and rubric aggregators.

Pure: imports no Kafka, judge or metrics library.
"""
