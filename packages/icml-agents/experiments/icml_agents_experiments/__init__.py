"""icml-agents's experiments (unpublished): each system's reproduction, testbeds, benchmarks and scripts, in a
folder named like the library subpackage they exercise (``icml_agents.<system>`` -> ``icml_agents_experiments.<system>``)."""
