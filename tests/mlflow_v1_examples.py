"""Few-shot examples of the MLflow v1 metrics that seed 002 names but does not quote.

The seed quotes answer similarity's two examples in full and, for the other four metrics,
only which examples they use (``default_examples = [example_score_2, example_score_5]``).
The text below is those examples' text as MLflow ships it (``mlflow/metrics/genai/prompts/
v1.py``), so the rules reproduce what MLflow sends to its judge.
"""

from __future__ import annotations

from seed_mlflow import Example

_MLFLOW_CONTEXT = (
    "MLflow is an open-source platform for managing the end-to-end machine "
    "learning (ML) lifecycle. It was developed by Databricks, a company that specializes "
    "in big data and machine learning solutions. MLflow is designed to address the "
    "challenges that data scientists and machine learning engineers face when developing, "
    "training, and deploying machine learning models."
)
_QUESTION = "How is MLflow related to Databricks?"
_DATABRICKS_ONLY = (
    "Databricks is a data engineering and analytics platform designed to help "
    "organizations process and analyze large amounts of data. Databricks is a company "
    "specializing in big data and machine learning solutions."
)
_PRODUCT = (
    "MLflow is a product created by Databricks to enhance the efficiency of machine "
    "learning processes."
)

EXAMPLES: dict[str, dict[str, Example]] = {
    "FaithfulnessMetric": {
        "example_score_2": Example(
            input=_QUESTION,
            output="Databricks is a company that specializes in big data and machine learning "
            "solutions. MLflow has nothing to do with Databricks. MLflow is an open-source platform "
            "for managing the end-to-end machine learning (ML) lifecycle.",
            score=2,
            justification='The output claims that "MLflow has nothing to do with Databricks" which is '
            'contradictory to the provided context that states "It was developed by Databricks". This '
            'is a major inconsistency. However, the output correctly identifies that "MLflow is an '
            'open-source platform for managing the end-to-end machine learning (ML) lifecycle" and '
            '"Databricks is a company that specializes in big data and machine learning solutions", '
            "which are both supported by the context. Therefore, some of the claims in the output can "
            "be inferred from the provided context, but the majority of the output is inconsistent "
            "with the provided context, leading to a faithfulness score of 2.",
            grading_context={"context": _MLFLOW_CONTEXT},
        ),
        "example_score_5": Example(
            input=_QUESTION,
            output="Databricks is a company that specializes in big data and machine learning "
            "solutions.",
            score=5,
            justification='The output states that "Databricks is a company that specializes in big data'
            ' and machine learning solutions." This claim is directly supported by the context, which '
            'states "It was developed by Databricks, a company that specializes in big data and '
            'machine learning solutions." Therefore, the faithfulness score is 5 as all the claims in '
            'the output are directly supported by the provided context."',
            grading_context={"context": _MLFLOW_CONTEXT},
        ),
    },
    "AnswerCorrectnessMetric": {
        "example_score_2": Example(
            input=_QUESTION,
            output=_DATABRICKS_ONLY,
            score=2,
            justification="The output provided by the model does demonstrate some degree of semantic "
            "similarity to the targets, as it correctly identifies Databricks as a company "
            "specializing in big data and machine learning solutions. However, it fails to address "
            "the main point of the input question, which is the relationship between MLflow and "
            "Databricks. The output does not mention MLflow at all, which is a significant discrepancy "
            "with the provided targets. Therefore, the model's answer_correctness score is 2.",
            grading_context={"targets": _MLFLOW_CONTEXT},
        ),
        "example_score_4": Example(
            input=_QUESTION,
            output=_PRODUCT,
            score=4,
            justification="The output provided by the model is mostly correct. It correctly identifies "
            "that MLflow is a product created by Databricks. However, it does not mention that MLflow "
            "is an open-source platform for managing the end-to-end machine learning lifecycle, which "
            "is a significant part of its function. Therefore, while the output is mostly accurate, "
            "it has a minor omission, which is why it gets a score of 4 according to the grading "
            "rubric.",
            grading_context={"targets": _MLFLOW_CONTEXT},
        ),
    },
    "AnswerRelevanceMetric": {
        "example_score_2": Example(
            input=_QUESTION,
            output="Databricks is a company that specializes in big data and machine learning "
            "solutions.",
            score=2,
            justification="The output provided by the model does give some information about "
            "Databricks, which is part of the input question. However, it does not address the main "
            "point of the question, which is the relationship between MLflow and Databricks. "
            "Therefore, while the output is not completely irrelevant, it does not fully answer the "
            "question, leading to a lower score.",
        ),
        "example_score_5": Example(
            input=_QUESTION,
            output=_PRODUCT,
            score=5,
            justification="The output directly addresses the input question by explaining the "
            "relationship between MLflow and Databricks. It provides a clear and concise answer that "
            "MLflow is a product created by Databricks, and also adds relevant information about the "
            "purpose of MLflow, which is to enhance the efficiency of machine learning processes. "
            "Therefore, the output is highly relevant to the input and deserves a full score.",
        ),
    },
    "RelevanceMetric": {
        "example_score_2": Example(
            input=_QUESTION,
            output=_DATABRICKS_ONLY,
            score=2,
            justification="The output provides relevant information about Databricks, mentioning it "
            "as a company specializing in big data and machine learning solutions. However, it doesn't "
            "directly address how MLflow is related to Databricks, which is the specific question "
            "asked in the input. Therefore, the output is only somewhat related to the provided "
            "context.",
            grading_context={"context": _MLFLOW_CONTEXT},
        ),
        "example_score_4": Example(
            input=_QUESTION,
            output=_PRODUCT,
            score=4,
            justification="The output provides a relevant and accurate statement about the "
            "relationship between MLflow and Databricks. While it doesn't provide extensive detail, "
            "it still offers a substantial and meaningful response. To achieve a score of 5, the "
            "response could be further improved by providing additional context or details about "
            "how MLflow specifically functions within the Databricks ecosystem.",
            grading_context={"context": _MLFLOW_CONTEXT},
        ),
    },
}
