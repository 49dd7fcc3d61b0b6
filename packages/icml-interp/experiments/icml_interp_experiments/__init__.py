"""icml-interp's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_interp.<system>`` -> ``icml_interp_experiments.<system>``)."""
