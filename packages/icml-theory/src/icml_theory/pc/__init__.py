"""Predictive coding for any sequential stack of torch modules: state-based PC (sPC), error-based PC (ePC,
arXiv 2505.20137) and backprop under one trainer API, with the energies and the diagnostics (energy per
inference step, per-layer weight-gradient norms, agreement with the equilibrium gradient).

.. code-block:: python

    from icml_theory.pc import EPC
    trainer = EPC(nn.Sequential(nn.Sequential(nn.Linear(64, 128), nn.Tanh()), nn.Linear(128, 10)),
                  loss="ce", inference_lr=0.1, inference_steps=20, lr=1e-3)
    trainer.fit(x, y, epochs=10, batch_size=64)
    logits = trainer.predict(x_test)

Each top-level module of the stack is one PC layer (one state); group modules with a nested
``nn.Sequential``. Needs the ``torch`` extra.
"""

from icml_theory.pc.diagnostics import (
    Equilibrium,
    equilibrium,
    iterations_to_tolerance,
    relative_error,
)
from icml_theory.pc.energy import (
    as_layers,
    energy,
    error_energy,
    forward_states,
    local_energy,
    output_loss,
    states_from_errors,
)
from icml_theory.pc.trainers import EPC, SPC, Backprop, Trainer, TrainStep

__all__ = [
    "EPC",
    "SPC",
    "Backprop",
    "Equilibrium",
    "TrainStep",
    "Trainer",
    "as_layers",
    "energy",
    "equilibrium",
    "error_energy",
    "forward_states",
    "iterations_to_tolerance",
    "local_energy",
    "output_loss",
    "relative_error",
    "states_from_errors",
]
