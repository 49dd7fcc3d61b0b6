"""DLMRs testbed, frozen base, training stages and reproduction ``dlmr-chains``."""
