"""Reads the MLflow seed document (seed 002) for golden tests, independently of the rule files.

The seed quotes MLflow's source: its Python code blocks are evaluated here (string constants
by running the block, metric classes by reading their literals with ``ast``), so the
expected prompts come from the seed's own text, not from the rule files under test.
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass
from typing import Any

from seed_doc import SEEDS

MLFLOW_SEED = SEEDS / "002_ad59c3e73b620131.txt"

_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[str]:
    return _BLOCK.findall(MLFLOW_SEED.read_text(encoding="utf-8"))


class PromptTemplate:
    """MLflow's ``PromptTemplate`` semantics as the seed's template code uses them: segments
    are concatenated; a segment whose variables are not all given is dropped."""

    def __init__(self, template: str | list[str]) -> None:
        self.segments = [template] if isinstance(template, str) else template

    def format(self, **values: Any) -> str:
        given = {k: v for k, v in values.items() if v is not None}
        out = []
        for segment in self.segments:
            names = [f for _, f, _, _ in string.Formatter().parse(segment) if f]
            if all(n in given for n in names):
                out.append(segment.format(**given))
        return "".join(out)

    def partial_fill(self, **values: Any) -> PromptTemplate:
        filled = []
        for segment in self.segments:
            names = [f for _, f, _, _ in string.Formatter().parse(segment) if f]
            filled.append(segment.format_map({n: values.get(n, "{" + n + "}") for n in names}))
        return PromptTemplate(filled)


def judge_prompts() -> dict[str, str]:
    """Every string constant the judge and instructions blocks define (e.g. SAFETY_PROMPT)."""
    namespace: dict[str, Any] = {}
    for block in _blocks():
        if "class " in block or "def _build_grading_prompt_template" in block:
            continue
        exec(block, namespace)
    return {k: v for k, v in namespace.items() if k.isupper() and isinstance(v, str)}


def grading_template(include_input: bool) -> PromptTemplate:
    """The seed's ``_build_grading_prompt_template``, run."""
    block = next(b for b in _blocks() if "def _build_grading_prompt_template" in b)
    namespace: dict[str, Any] = {"PromptTemplate": PromptTemplate}
    exec(block.split("\n\ngrading_system_prompt_template")[0], namespace)
    template: PromptTemplate = namespace["_build_grading_prompt_template"](include_input)
    return template


@dataclass
class Example:
    output: str
    score: float
    justification: str
    input: str | None = None
    grading_context: dict[str, str] | None = None

    def __str__(self) -> str:
        """As MLflow's ``EvaluationExample.__str__`` renders an example."""
        context = (
            "\n".join(f"key: {k}\nvalue:\n{v}" for k, v in self.grading_context.items())
            if self.grading_context is not None
            else None
        )
        return PromptTemplate(
            [
                "\nExample Input:\n{input}\n",
                "\nExample Output:\n{output}\n",
                "\nAdditional information used by the model:\n{grading_context}\n",
                "\nExample score: {score}\nExample justification: {justification}\n        ",
            ]
        ).format(
            input=self.input,
            output=self.output,
            grading_context=context,
            score=self.score,
            justification=self.justification,
        )


@dataclass
class Metric:
    cls: str
    definition: str
    grading_prompt: str
    grading_context_columns: list[str]
    examples: dict[str, Example]  # example_score_N -> example, as far as the seed quotes them
    default_examples: list[str]


def metrics() -> dict[str, Metric]:
    """The five v1 metric classes, read from the seed's code with ``ast``."""
    found = {}
    for block in _blocks():
        tree = ast.parse(block)
        for node in tree.body:
            if not isinstance(node, ast.ClassDef) or not node.name.endswith("Metric"):
                continue
            values: dict[str, Any] = {}
            examples: dict[str, Example] = {}
            for stmt in node.body:
                if not isinstance(stmt, ast.Assign) or not isinstance(stmt.targets[0], ast.Name):
                    continue
                name = stmt.targets[0].id
                if isinstance(stmt.value, ast.Call):
                    kwargs = {k.arg: ast.literal_eval(k.value) for k in stmt.value.keywords}
                    examples[name] = Example(**kwargs)
                elif isinstance(stmt.value, ast.List):
                    values[name] = [
                        e.id if isinstance(e, ast.Name) else ast.literal_eval(e)
                        for e in stmt.value.elts
                    ]
                elif isinstance(stmt.value, ast.Constant):
                    values[name] = stmt.value.value
            found[node.name] = Metric(
                cls=node.name,
                definition=values["definition"],
                grading_prompt=values["grading_prompt"],
                grading_context_columns=values.get("grading_context_columns", []),
                examples=examples,
                default_examples=values["default_examples"],
            )
    return found


def grading_context_text(columns: list[str]) -> str:
    """MLflow's ``_format_args_string`` with each column's value left as a ``{{column}}``
    placeholder (the seed names the columns; the rule maps them to trace fields)."""
    if not columns:
        return ""
    return "Additional information used by the model:\n" + "\n".join(
        f"key: {c}\nvalue:\n{{{{{c}}}}}" for c in columns
    )


def metric_prompt(
    name: str, metric: Metric, examples: list[Example], *, include_input: bool
) -> str:
    """The full grading prompt of a v1 metric, with ``{{input}}``, ``{{output}}`` and each
    grading-context column as placeholders, as ``make_genai_metric`` assembles it."""
    examples_text = "Examples:\n" + "\n".join(map(str, examples)) if examples else ""
    filled = grading_template(include_input).partial_fill(
        name=name,
        definition=metric.definition,
        grading_prompt=metric.grading_prompt,
        examples=examples_text,
    )
    return filled.format(
        input="{{input}}",
        output="{{output}}",
        grading_context_columns=grading_context_text(metric.grading_context_columns),
    )
