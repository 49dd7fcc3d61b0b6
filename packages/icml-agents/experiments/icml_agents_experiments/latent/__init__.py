"""lt-tuning-reasoning: testbeds, training stages, reproduction and benchmark of LT-Tuning (issue 49)."""
