"""The rule packs shipped with llm-trace-scorer, installed as this package's data: one folder
per pack, one YAML file per rule, and the pack's own Python (checks, aggregators), which the
scorer loads by path (stream/ruleset/packs.py), never by importing this package."""
