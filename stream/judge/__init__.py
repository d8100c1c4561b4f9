"""The judge: ``client.JudgeClient`` implements the engine's ``Judge`` protocol (retries,
adaptive pacing, availability) over a transport (``openai_api``: any OpenAI-compatible
endpoint), configured by ``config.JudgeConfig``; and the answer contract (``contract``: the
JSON schemas asked for, ``answers`` and ``criteria``: parsing the answers).

Nothing is imported here, so the settings can build a ``JudgeConfig`` without loading the
judge's SDK.
"""
