"""Text building blocks shared by the rule set, the engine and rule packs' checks: the
prompt-template grammar, mapped values as prompt text, and simple text measures. Pure."""
