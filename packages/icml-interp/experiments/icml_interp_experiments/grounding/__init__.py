"""Grounding IDs (``grounding-ids-toy``): grid scenes of coloured shapes, a tiny LLaVA trained here on "which
cell holds X?" with and without external cues, and the reproduction."""
