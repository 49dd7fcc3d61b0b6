"""SpeechCombine experiments: the synthetic second-modality testbed, the reproduction and the benchmark."""
