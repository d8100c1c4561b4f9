"""The judge: an OpenAI-compatible client (retries, adaptive pacing) that implements the
engine's ``Judge`` protocol, and the answer contract (JSON schemas asked for, answers parsed)."""
