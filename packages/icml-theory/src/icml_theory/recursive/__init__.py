"""Latent recursion as policy improvement (arXiv 2511.16886): the Tiny Recursive Model (TRM) with deep
supervision and a halting head, and Deep Improvement Supervision (DIS), which supervises every recursion step
toward the next frame of a corruption path from the input to the solution and so needs 18 network
evaluations per example where TRM's schedule runs 336.

.. code-block:: python

    from icml_theory.recursive import RecursiveModel, RecursiveTrainer, dis_config, evaluate
    model = RecursiveModel(dis_config(vocab_size=7, seq_len=36), seed=0)
    RecursiveTrainer(model, lr=1e-3).fit(puzzles, solutions, epochs=10, batch_size=64)
    result = evaluate(model, test_puzzles, test_solutions)
    result.exact[-1], result.evaluations[-1]  # exact accuracy after all steps, 18 evaluations per example

Needs the ``torch`` extra. Our reading of the paper's classifier-free-guidance view (``method="dis-cfg"``) is
described in :mod:`icml_theory.recursive.training`.
"""

from icml_theory.recursive.model import (
    EvaluationCounter,
    ReasoningNet,
    RecursiveConfig,
    RecursiveModel,
    count_evaluations,
    dis_config,
    trm_config,
)
from icml_theory.recursive.training import (
    BatchResult,
    Evaluation,
    RecursiveTrainer,
    check_tokens,
    corruption_path,
    evaluate,
    predict,
    sequence_loss,
    stablemax_cross_entropy,
)

__all__ = [
    "BatchResult",
    "Evaluation",
    "EvaluationCounter",
    "ReasoningNet",
    "RecursiveConfig",
    "RecursiveModel",
    "RecursiveTrainer",
    "check_tokens",
    "corruption_path",
    "count_evaluations",
    "dis_config",
    "evaluate",
    "predict",
    "sequence_loss",
    "stablemax_cross_entropy",
    "trm_config",
]
