"""icml-theory's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_theory.<system>`` -> ``icml_theory_experiments.<system>``)."""
