"""icml-stats's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_stats.<system>`` -> ``icml_stats_experiments.<system>``)."""
