"""icml-kernels's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_kernels.<system>`` -> ``icml_kernels_experiments.<system>``)."""
