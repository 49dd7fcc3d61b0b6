"""icml-compress's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_compress.<system>`` -> ``icml_compress_experiments.<system>``)."""
