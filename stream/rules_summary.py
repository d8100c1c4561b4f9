"""What a worker says of its rules at start: the packs it loaded, what they cost a trace before
the trace's own text, and how to load the others (design record 39).

A few lines, not one per rule: a default start leaves dozens of shipped judge rules out, and
a line for each of them was most of what a newcomer's worker logged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from .judge.tokens import TokenCounter
from .ruleset.schema import LLMJudgeRule, PromptedRule, RuleSet


@dataclass(frozen=True)
class PerTarget:
    """The judge calls a rule set makes per target, at most, and the prompt tokens of its
    templates (before the target's own text is rendered in)."""

    trace_calls: int  # one per judged trace rule, a fan-out's items at its bound
    trace_template_tokens: int
    close_calls: dict[str, int]  # per thread kind (conversation, metric, ...) and pair
    close_template_tokens: dict[str, int]
    tool_rules: int  # judges that read the trace by tools: more rounds, their own choice
    call_calls: int = 0  # one per judged tool-call rule, for each tool call of a trace
    call_template_tokens: int = 0

    def line(self) -> str:
        closes = ", ".join(
            f"{calls} a {kind} close (~{self.close_template_tokens[kind]:,} tokens)"
            for kind, calls in sorted(self.close_calls.items())
        )
        said = (
            f"judge calls: at most {self.trace_calls} a trace "
            f"(~{self.trace_template_tokens:,} prompt tokens of templates)"
        )
        if self.call_calls:
            said += f", {self.call_calls} a tool call (~{self.call_template_tokens:,} tokens)"
        if closes:
            said += f", {closes}"
        if self.tool_rules:
            said += f"; {self.tool_rules} rules read the trace by tools (extra rounds)"
        return said + "; plus each target's own text: `scorer estimate FILE` prices a sample"


def per_target(ruleset: RuleSet, counter: TokenCounter | None = None) -> PerTarget:
    """What ``ruleset``'s judged rules cost per target, before the target's text."""
    counter = counter or TokenCounter()
    trace_calls = trace_tokens = tools = call_calls = call_tokens = 0
    close_calls: Counter[str] = Counter()
    close_tokens: Counter[str] = Counter()
    for rule in ruleset.rules:
        if not isinstance(rule, PromptedRule):
            continue
        calls = 1
        if isinstance(rule, LLMJudgeRule) and rule.fan_out is not None:
            calls = rule.fan_out.max_items
        tokens = calls * counter.messages("", rule.system_prompt, rule.prompt)
        if rule.judge.tools is not None:
            tools += 1
        if rule.scope == "trace":
            trace_calls += calls
            trace_tokens += tokens
        elif rule.scope == "tool_call":
            call_calls += calls
            call_tokens += tokens
        else:
            thread = getattr(rule, "thread", None)
            kind = "pair" if rule.scope == "pair" else getattr(thread, "kind", None) or "thread"
            close_calls[kind] += calls
            close_tokens[kind] += tokens
    return PerTarget(
        trace_calls,
        trace_tokens,
        dict(close_calls),
        dict(close_tokens),
        tools,
        call_calls,
        call_tokens,
    )


def summary(ruleset: RuleSet) -> list[str]:
    """The start's lines on the rules: packs loaded, cost per target, what is not loaded."""
    rules_by_pack: defaultdict[str, list[str]] = defaultdict(list)
    for rule in ruleset.rules:
        rules_by_pack[rule.pack].append("judge" if isinstance(rule, PromptedRule) else "check")
    packs = ", ".join(
        f"{pack} ({Counter(kinds)['judge']} judge rules, {Counter(kinds)['check']} checks)"
        for pack, kinds in sorted(rules_by_pack.items())
    )
    lines = [f"packs loaded: {packs or 'none'}", per_target(ruleset).line()]
    by_reason: defaultdict[str, list[str]] = defaultdict(list)
    for off in ruleset.disabled:
        by_reason[off.by].append(f"{off.rule.pack}/{off.rule.id}")
    for reason, rules in sorted(by_reason.items()):
        if len(rules) > 5:
            packs_off = sorted({rule.split("/")[0] for rule in rules})
            lines.append(f"{len(rules)} rules of {', '.join(packs_off)} not run: {reason}")
        else:
            lines.append(f"not run: {', '.join(rules)} ({reason})")
    return lines
