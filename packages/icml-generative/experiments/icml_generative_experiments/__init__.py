"""icml-generative's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_generative.<system>`` -> ``icml_generative_experiments.<system>``)."""
