"""RaGEP (issue 30): the tiny MoE testbed, reproduction and benchmark."""
