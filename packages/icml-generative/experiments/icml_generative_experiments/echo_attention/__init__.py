"""EchoAttention: the ``echo-frontier`` reproduction."""
