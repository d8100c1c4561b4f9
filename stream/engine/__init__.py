"""The rule engine: plan a trace or a closed thread against the rule set (filters, sampling,
variables, deterministic checks, prompts), call the judge through the ``Judge`` protocol, and
build every decision record and score event. Pure with respect to Kafka and the judge's SDK.
"""
